// A real A2A server for tests: @a2a-js/sdk's DefaultRequestHandler behind the node:http adapter
// of scripts/lib/a2a-http.ts (A2A 1.0, and the SDK's 0.3 compatibility handler for requests
// without `A2A-Version: 1.0`; the SDK's express adapter needs express, which the project does
// not depend on). It records the JSON-RPC requests and headers that reached it.
//
// Skills (chosen by `metadata.skill` of the message, else by the text's first word):
// - `echo`: a task completed at once, its status message `echo: <text>`;
// - `count`: `count N GAP_MS` publishes N `working` status updates GAP_MS apart, then completes;
//   `count N held` publishes each update only once the test calls `step()`;
// - `wait`: a task left `working` until it is cancelled.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { AgentCard, Message, Task, TaskStatusUpdateEvent } from '@a2a-js/sdk';
import {
  AgentEvent,
  DefaultRequestHandler,
  InMemoryTaskStore,
  type AgentExecutor,
  type ExecutionEventBus,
  type RequestContext,
} from '@a2a-js/sdk/server';
import { serveA2a } from '../../scripts/lib/a2a-http.ts';
import { rawUpstream, readAll, type RawUpstream } from './proxy-helpers.ts';

const A2A_SKILLS = ['echo', 'count', 'wait'] as const;

function textOf(ctx: RequestContext): string {
  const part = ctx.userMessage.parts.find((p) => p.content?.$case === 'text');
  return part?.content?.$case === 'text' ? part.content.value : '';
}

function status(ctx: RequestContext, state: string, text?: string) {
  return AgentEvent.statusUpdate(
    TaskStatusUpdateEvent.fromJSON({
      taskId: ctx.taskId,
      contextId: ctx.contextId,
      status: {
        state,
        timestamp: new Date().toISOString(),
        ...(text
          ? {
              message: {
                messageId: randomUUID(),
                role: 'ROLE_AGENT',
                parts: [{ text }],
                taskId: ctx.taskId,
                contextId: ctx.contextId,
              },
            }
          : {}),
      },
    }),
  );
}

class TestExecutor implements AgentExecutor {
  private readonly cancelled = new Set<string>();
  private readonly waiting = new Map<string, () => void>();
  // `count N held`: the steps the test allowed ahead of time, and the executions waiting for one.
  private credits = 0;
  private readonly stepWaiters: Array<() => void> = [];

  step(): void {
    const waiter = this.stepWaiters.shift();
    if (waiter) waiter();
    else this.credits += 1;
  }

  private nextStep(gap: string): Promise<void> {
    if (gap !== 'held') return new Promise((r) => setTimeout(r, Number(gap)));
    if (this.credits > 0) {
      this.credits -= 1;
      return Promise.resolve();
    }
    return new Promise((r) => this.stepWaiters.push(r));
  }

  async execute(ctx: RequestContext, bus: ExecutionEventBus): Promise<void> {
    const text = textOf(ctx);
    const skill = (ctx.userMessage.metadata?.skill as string | undefined) ?? text.split(/\s+/)[0];
    bus.publish(
      AgentEvent.task(
        Task.fromJSON({
          id: ctx.taskId,
          contextId: ctx.contextId,
          status: { state: 'TASK_STATE_SUBMITTED', timestamp: new Date().toISOString() },
          history: [Message.toJSON(ctx.userMessage)],
        }),
      ),
    );
    if (skill === 'count') {
      const [, n = '3', gap = '300'] = text.split(/\s+/);
      for (let i = 1; i <= Number(n); i++) {
        await this.nextStep(gap);
        if (this.cancelled.has(ctx.taskId)) return bus.finished();
        bus.publish(status(ctx, 'TASK_STATE_WORKING', `step ${i}`));
      }
      bus.publish(status(ctx, 'TASK_STATE_COMPLETED', `counted to ${n}`));
    } else if (skill === 'wait') {
      bus.publish(status(ctx, 'TASK_STATE_WORKING', 'waiting'));
      await new Promise<void>((resolve) => this.waiting.set(ctx.taskId, resolve));
      return bus.finished();
    } else {
      bus.publish(status(ctx, 'TASK_STATE_COMPLETED', `echo: ${text}`));
    }
    bus.finished();
  }

  async cancelTask(taskId: string, bus: ExecutionEventBus): Promise<void> {
    this.cancelled.add(taskId);
    bus.publish(
      AgentEvent.statusUpdate(
        TaskStatusUpdateEvent.fromJSON({
          taskId,
          contextId: '',
          status: { state: 'TASK_STATE_CANCELED', timestamp: new Date().toISOString() },
        }),
      ),
    );
    this.waiting.get(taskId)?.();
    bus.finished();
  }
}

/** The upstream's own card: its JSON-RPC interface (1.0 and 0.3), a bearer scheme of its own, three skills. */
function cardFor(url: string, skills: readonly string[] = A2A_SKILLS) {
  return AgentCard.fromJSON({
    name: 'test-a2a-upstream',
    description: 'An A2A agent for the tests',
    version: '1.0.0',
    supportedInterfaces: [
      { url, protocolBinding: 'JSONRPC', protocolVersion: '1.0' },
      { url, protocolBinding: 'JSONRPC', protocolVersion: '0.3' },
    ],
    provider: { organization: 'tests', url: new URL('/about', url).toString() },
    capabilities: { streaming: true, pushNotifications: false },
    securitySchemes: { upstream_key: { apiKeySecurityScheme: { location: 'header', name: 'x-upstream-key' } } },
    securityRequirements: [{ schemes: { upstream_key: { list: [] } } }],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: skills.map((id) => ({ id, name: id, description: `the ${id} skill`, tags: ['test'] })),
  });
}

export type A2aUpstream = RawUpstream & {
  /** The JSON-RPC requests that reached the server, as sent. */
  bodies: Array<{ method: string; params?: unknown }>;
  seen: IncomingMessage['headers'][];
  /** Card requests that reached the server. */
  cardReads: number;
  /** Serves a card that also lists these skills from now on (the executor does not know them). */
  announceSkills(extra: string[]): void;
  /** Lets a `count N held` task publish its next update. */
  step(): void;
};

/** Serves the card at /.well-known/agent-card.json and JSON-RPC at /a2a. */
/** `responseHeaders`: set on every answer to a POST (a metered agent's cost header, say). */
export async function startA2aServer(opts: { responseHeaders?: Record<string, string> } = {}): Promise<A2aUpstream> {
  const state: { handler?: DefaultRequestHandler; card?: AgentCard } = {};
  const bodies: A2aUpstream['bodies'] = [];
  const seen: A2aUpstream['seen'] = [];
  let cardReads = 0;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await readAll(req);
    if (req.method === 'GET') cardReads++;
    else if (req.method === 'POST') {
      seen.push(req.headers);
      try {
        bodies.push(JSON.parse(body.toString('utf8')) as { method: string });
      } catch {
        // not JSON: the handler answers its parse error
      }
    }
    if (req.method === 'POST')
      for (const [name, value] of Object.entries(opts.responseHeaders ?? {})) res.setHeader(name, value);
    await serveA2a(state.handler!, state.card!, req, res, body);
  }

  const up = await rawUpstream(
    (req, res) =>
      void handle(req, res).catch(() => {
        if (!res.headersSent) res.writeHead(500);
        res.end();
      }),
    '/a2a',
  );
  state.card = cardFor(up.url);
  const executor = new TestExecutor();
  state.handler = new DefaultRequestHandler(state.card, new InMemoryTaskStore(), executor);
  return Object.assign(up, {
    step: () => executor.step(),
    bodies,
    seen,
    get cardReads() {
      return cardReads;
    },
    announceSkills(extra: string[]) {
      state.card = cardFor(up.url, [...A2A_SKILLS, ...extra]);
    },
  });
}
