// A real A2A server for tests: @a2a-js/sdk's DefaultRequestHandler behind its framework-agnostic
// JSON-RPC transport handlers (A2A 1.0, and the SDK's 0.3 compatibility handler for requests
// without `A2A-Version: 1.0`), served by a small node:http adapter, since the SDK's express
// adapter needs express, which the project does not depend on. The adapter does what the SDK's
// express jsonRpcHandler does: pick the handler by A2A-Version, answer a stream as SSE
// (`data: <JSON-RPC response>` events), anything else as one JSON body.
//
// Skills (chosen by `metadata.skill` of the message, else by the text's first word):
// - `echo`: a task completed at once, its status message `echo: <text>`;
// - `count`: `count N GAP_MS` publishes N `working` status updates GAP_MS apart, then completes;
// - `wait`: a task left `working` until it is cancelled.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { AgentCard, Message, Task, TaskStatusUpdateEvent } from '@a2a-js/sdk';
import {
  AgentEvent,
  DefaultRequestHandler,
  InMemoryTaskStore,
  JsonRpcTransportHandler,
  ServerCallContext,
  type AgentExecutor,
  type ExecutionEventBus,
  type RequestContext,
} from '@a2a-js/sdk/server';
import { LegacyJsonRpcTransportHandler } from '@a2a-js/sdk/compat/v0_3/server';
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
        await new Promise((r) => setTimeout(r, Number(gap)));
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
function cardFor(url: string) {
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
    skills: A2A_SKILLS.map((id) => ({ id, name: id, description: `the ${id} skill`, tags: ['test'] })),
  });
}

export type A2aUpstream = RawUpstream & {
  /** The JSON-RPC requests that reached the server, as sent. */
  bodies: Array<{ method: string; params?: unknown }>;
  seen: IncomingMessage['headers'][];
  /** Card requests that reached the server. */
  cardReads: number;
};

/** Serves the card at /.well-known/agent-card.json and JSON-RPC at /a2a. */
export async function startA2aServer(): Promise<A2aUpstream> {
  const state: { handler?: DefaultRequestHandler; card?: AgentCard } = {};
  const bodies: A2aUpstream['bodies'] = [];
  const seen: A2aUpstream['seen'] = [];
  let cardReads = 0;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (req.method === 'GET' && req.url === '/.well-known/agent-card.json') {
      cardReads++;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(AgentCard.toJSON(state.card!)));
      return;
    }
    if (req.method !== 'POST') return void res.writeHead(405).end();
    seen.push(req.headers);
    const text = (await readAll(req)).toString('utf8');
    const body = JSON.parse(text) as { method: string; id?: unknown };
    bodies.push(body);
    const legacy = (req.headers['a2a-version'] ?? '0.3') === '0.3';
    const transport = legacy
      ? new LegacyJsonRpcTransportHandler(state.handler!)
      : new JsonRpcTransportHandler(state.handler!);
    const context = new ServerCallContext({ requestedVersion: legacy ? '0.3' : '1.0' });
    const answer = await transport.handle(body, context);
    if (answer && typeof (answer as AsyncGenerator)[Symbol.asyncIterator] === 'function') {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.flushHeaders();
      for await (const event of answer as AsyncGenerator<unknown>) res.write(`data: ${JSON.stringify(event)}\n\n`);
      res.end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
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
  state.handler = new DefaultRequestHandler(state.card, new InMemoryTaskStore(), new TestExecutor());
  return Object.assign(up, {
    bodies,
    seen,
    get cardReads() {
      return cardReads;
    },
  });
}
