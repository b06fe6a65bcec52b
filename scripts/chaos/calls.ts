// The load a scenario drives through the gateway API: agents, transactional and streaming calls
// (a refused connection is a result, never a throw), polling their outcomes, and a bounded pool
// to run many at once.
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@temporalio/client';
import { check } from './report.ts';

export type Caller = { apiUrl: string; token: string };

export async function createAgent(caller: Caller, fields: Record<string, unknown>): Promise<string> {
  const res = await fetch(`${caller.apiUrl}/v1/agents`, {
    method: 'POST',
    headers: { authorization: `Bearer ${caller.token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name: `chaos-${randomBytes(4).toString('hex')}`, ...fields }),
  });
  const body = (await res.json()) as { id?: string };
  check(res.status === 201 && typeof body.id === 'string', `agent not created: ${res.status} ${JSON.stringify(body)}`);
  return body.id;
}

export type InvokeResult =
  | { kind: 'answered'; status: number; invocationId: string | null; body: string; retryAfter: string | null }
  | { kind: 'refused'; error: string };

/** POSTs a call to `/v1/proxy/{path}` and reads its answer; a connection that fails (API down) is `refused`, never thrown. */
async function proxyCall(
  caller: Caller,
  path: string,
  requestId: string,
  body: string,
  answer: (res: Response) => Promise<InvokeResult>,
): Promise<InvokeResult> {
  try {
    const res = await fetch(`${caller.apiUrl}/v1/proxy/${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${caller.token}`,
        'content-type': 'application/json',
        'x-request-id': requestId,
      },
      body,
      signal: AbortSignal.timeout(120_000),
    });
    return await answer(res);
  } catch (err) {
    return { kind: 'refused', error: ((err as Error).cause as Error | undefined)?.message ?? (err as Error).message };
  }
}

/** One transactional call. */
export function invoke(caller: Caller, agentId: string, requestId: string, body = '{"hello":"chaos"}') {
  return proxyCall(caller, agentId, requestId, body, async (res) => {
    const text = await res.text();
    let invocationId: string | null = null;
    if (res.status === 202) invocationId = (JSON.parse(text) as { invocation_id: string }).invocation_id;
    return {
      kind: 'answered',
      status: res.status,
      invocationId,
      body: text,
      retryAfter: res.headers.get('retry-after'),
    };
  });
}

/** One streaming call (`/v1/proxy/{id}/stream`), read to its end. */
export function invokeStream(caller: Caller, agentId: string, requestId: string, body = '{"hello":"chaos"}') {
  return proxyCall(caller, `${agentId}/stream`, requestId, body, async (res) => ({
    kind: 'answered',
    status: res.status,
    invocationId: res.headers.get('x-gateway-invocation-id'),
    body: await res.text(),
    retryAfter: res.headers.get('retry-after'),
  }));
}

export type InvocationView = {
  status: string;
  error_class: string | null;
  upstream_status: number | null;
  request_id?: string;
};

export async function getInvocation(
  caller: Caller,
  agentId: string,
  invocationId: string,
): Promise<InvocationView | null> {
  const res = await fetch(`${caller.apiUrl}/v1/proxy/${agentId}/invocations/${invocationId}`, {
    headers: { authorization: `Bearer ${caller.token}` },
  });
  if (res.status !== 200) return null;
  return (await res.json()) as InvocationView;
}

/** Polls until every invocation is terminal (through the API) or the deadline passes; returns each one's last view. */
export async function awaitTerminal(
  caller: Caller,
  agentId: string,
  ids: string[],
  timeoutMs: number,
): Promise<Map<string, InvocationView | null>> {
  const views = new Map<string, InvocationView | null>();
  const open = new Set(ids);
  const deadline = Date.now() + timeoutMs;
  while (open.size && Date.now() < deadline) {
    const batch = [...open];
    for (let i = 0; i < batch.length; i += 20) {
      await Promise.all(
        batch.slice(i, i + 20).map(async (id) => {
          const view = await getInvocation(caller, agentId, id).catch(() => null);
          views.set(id, view);
          if (view && (view.status === 'succeeded' || view.status === 'failed')) open.delete(id);
        }),
      );
    }
    if (open.size) await sleep(1_000);
  }
  return views;
}

/**
 * Waits (up to `timeoutMs`) for a workflow to close and returns its status name and result. A
 * row turns terminal before its workflow closes (the activity writes it, then the workflow
 * returns), and an activity's result sent while Temporal was down is only recovered by its retry.
 */
export async function awaitWorkflow(
  temporal: Client,
  workflowId: string,
  timeoutMs: number,
): Promise<{ status: string; result: unknown }> {
  const handle = temporal.workflow.getHandle(workflowId);
  let timer: NodeJS.Timeout | undefined;
  const result = await Promise.race([
    handle.result().catch((err: Error) => ({ error: err.message })),
    new Promise<undefined>((r) => (timer = setTimeout(() => r(undefined), timeoutMs))),
  ]).finally(() => clearTimeout(timer));
  return { status: (await handle.describe()).status.name, result };
}

/** Runs `count` jobs with at most `concurrency` at once. */
export async function runPool<T>(count: number, concurrency: number, job: (i: number) => Promise<T>): Promise<T[]> {
  const results: T[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(concurrency, count) }, async () => {
      while (next < count) {
        const i = next++;
        results[i] = await job(i);
      }
    }),
  );
  return results;
}
