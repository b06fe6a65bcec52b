// Small HTTP helpers over undici for tests that talk to the gateway as a caller would.
import { WorkflowNotFoundError } from '@temporalio/client';
import proto from '@temporalio/proto';
import { request } from 'undici';
import { stack } from './stack.ts';
import { waitFor, within } from './wait.ts';

export type Reply = { status: number; headers: Record<string, string | string[] | undefined>; text: string; json: any };

type CallOptions = { token?: string; json?: unknown; body?: string | Buffer; headers?: Record<string, string> };

/** One request to the gateway under test, as a caller would send it. */
export function call(method: string, path: string, opts: CallOptions = {}): Promise<Reply> {
  return callAt(stack().apiUrl, method, path, opts);
}

/** Like `call`, against any base URL (an extra gateway instance, a broken one). */
export async function callAt(base: string, method: string, path: string, opts: CallOptions = {}): Promise<Reply> {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  let body = opts.body;
  if (opts.json !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(opts.json);
  }
  const res = await request(`${base}${path}`, { method: method as 'GET', headers, body });
  const text = await res.body.text();
  return { status: res.statusCode, headers: res.headers, text, json: parseJson(text) };
}

/** A reply body as JSON, or undefined when it is empty or not JSON (tests assert on both). */
export function parseJson(text: string): unknown {
  try {
    return text ? JSON.parse(text) : undefined;
  } catch {
    return undefined;
  }
}

/** Polls an invocation until it is terminal (on the stack's API, or the one at `base`). */
export async function waitForInvocation(
  token: string,
  agentId: string,
  invocationId: string,
  timeoutMs = 30_000,
  base = stack().apiUrl,
): Promise<any> {
  let last: any;
  return waitFor(
    async () => {
      const res = await callAt(base, 'GET', `/v1/proxy/${agentId}/invocations/${invocationId}`, { token });
      if (res.status !== 200) throw new Error(`poll answered ${res.status}`);
      last = res.json;
      return (last.status === 'succeeded' || last.status === 'failed') && last;
    },
    {
      timeoutMs,
      everyMs: 100,
      what: `invocation ${invocationId} to finish`,
      state: async () => `still ${last?.status}, ${await workflowState(invocationId)}`,
    },
  );
}

/**
 * What a call that did not finish in time is waiting on: its workflow (pending activities and
 * workflow task, the version it runs on, its last events), or that none was started.
 */
async function workflowState(invocationId: string): Promise<string> {
  const read = async () => {
    const handle = stack().temporal.workflow.getHandle(invocationId);
    const described = await handle.describe();
    const parts = [`workflow ${described.status.name} on ${described.taskQueue}`];
    for (const a of described.raw.pendingActivities ?? [])
      parts.push(
        `${a.activityType?.name} attempt ${a.attempt}${a.lastFailure?.message ? ` (last failure: ${a.lastFailure.message})` : ''}`,
      );
    const task = described.raw.pendingWorkflowTask;
    if (task) parts.push(`workflow task state ${task.state} attempt ${task.attempt}`);
    const version = described.raw.workflowExecutionInfo?.versioningInfo?.deploymentVersion;
    if (version) parts.push(`version ${version.deploymentName}/${version.buildId}`);
    const events = (await handle.fetchHistory()).events ?? [];
    parts.push(
      `last events: ${events
        .slice(-4)
        .map((e) => proto.temporal.api.enums.v1.EventType[e.eventType ?? 0])
        .join(', ')}`,
    );
    return parts.join('; ');
  };
  try {
    return await within(read(), 5_000, "the stack's Temporal did not describe it within 5 s");
  } catch (err) {
    return err instanceof WorkflowNotFoundError
      ? "no workflow of that id on the stack's Temporal"
      : `its workflow could not be read (${(err as Error).name}: ${(err as Error).message})`;
  }
}

let counter = 0;
export function uniqueName(prefix = 'agent'): string {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}-${Math.random().toString(36).slice(2, 8)}`;
}
