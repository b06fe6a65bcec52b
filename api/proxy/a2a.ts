// The door's part of an A2A agent's call (the domain's is gateway/a2a/): the parse stage (a
// refused request is a 400), the task binding check (404), and the answer's two watchers on
// the streaming endpoint: the x402 A2A transport's receipt put into the answer, and the tap
// that binds the tasks the answer names as it passes.
import type { Readable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import type { Logger } from 'pino';
import { ApiError, parsedOr400 } from '../errors.ts';
import { parseA2aRequestBody } from '../../gateway/a2a/request.ts';
import { taskOfResult } from '../../gateway/a2a/methods.ts';
import { taskCaller, type TaskBindings } from '../../gateway/a2a/tasks.ts';
import { receiptInjector } from '../../gateway/a2a/x402.ts';
import { resultTap } from '../../gateway/jsonrpc/result-tap.ts';
import type { Agent } from '../../gateway/db/entities.ts';
import { errorKind } from '../../lib/error-kind.ts';
import type { A2aCall, ProxyCall } from './call.ts';

/** Parse stage: the call's A2A facts (gateway/a2a/request.ts); a request it refuses is a 400. */
export function parseA2aBody(body: Buffer, agent: Agent, mode: ProxyCall['mode']): A2aCall {
  return parsedOr400(() =>
    parseA2aRequestBody(body, {
      passUnknownMethods: agent.a2aPassUnknownMethods,
      streamingEndpoint: mode !== 'transactional',
    }),
  );
}

/**
 * Task binding (gateway/a2a/tasks.ts): a call about a task not seen through this agent, in this
 * tenant, by this caller side, is refused before policy, payment and the upstream, as an id of
 * another tenant is everywhere: 404, the same whether the task is someone else's or unknown.
 * Runs once the caller is known (a public call's payer, from its verified payment).
 */
export async function checkTaskBinding(bindings: TaskBindings, call: ProxyCall): Promise<void> {
  const ids = call.a2a?.taskIds ?? [];
  if (ids.length === 0) return;
  if (!(await bindings.allBound(call.caller.tenantId, call.agent.id, taskCaller(call.caller), ids)))
    throw new ApiError(404, 'task not found through this agent');
}

/**
 * The x402 A2A transport's receipt: a message paid in its metadata and settled gets, in the
 * agent's answer, `x402.payment.status: "payment-completed"` and `x402.payment.receipts:
 * [SettleResponse]` (gateway/a2a/x402.ts receiptInjector; the PAYMENT-RESPONSE header carries
 * the receipt whatever the answer). Null when the call has none to add.
 */
export function a2aReceiptInjector(
  call: Pick<ProxyCall, 'a2a' | 'payment'>,
  headers: IncomingHttpHeaders,
): ((body: Readable) => Readable) | null {
  const receipt = call.payment?.metaResponse;
  const x402 = call.a2a?.x402;
  const rpcId = call.a2a?.rpcId;
  if (!receipt || !x402?.paid || rpcId === undefined || rpcId === null) return null;
  return receiptInjector(headers, rpcId, x402.spelling, receipt);
}

/**
 * Watches an A2A agent's answer as it passes to the caller, without changing a byte
 * (gateway/jsonrpc/result-tap.ts), for the tasks it names (gateway/a2a/methods.ts
 * taskOfResult), and binds each to the agent before the caller can have read it
 * (gateway/a2a/tasks.ts): a caller told of a task can ask about it at once, on any replica. A
 * failed binding is logged; the answer still passes (the caller paid for it), and a later call
 * about that task is refused as unbound.
 */
export function a2aAnswerTap(
  call: ProxyCall,
  headers: IncomingHttpHeaders,
  bindings: TaskBindings,
  log: Pick<Logger, 'error'>,
): ((source: Readable) => Readable) | null {
  const a2a = call.a2a;
  if (!a2a) return null;
  const bound = new Set<string>();
  return resultTap(headers, async (result) => {
    const task = taskOfResult(result);
    if (!task) return;
    a2a.answered ??= task;
    if (bound.has(task.taskId)) return;
    bound.add(task.taskId);
    await bindings
      .bind(call.caller.tenantId, call.agent.id, taskCaller(call.caller), [task])
      .catch((err: unknown) =>
        log.error({ invocationId: call.invocationId, err: errorKind(err) }, 'could not bind an A2A task'),
      );
  });
}

/** What the call's completion records of its task: the request's, else the answer's first. */
export function a2aAnswered(call: ProxyCall): { a2aTaskId?: string | null; a2aContextId?: string | null } {
  const a2a = call.a2a;
  if (!a2a) return {};
  return {
    a2aTaskId: a2a.taskIds[0] ?? a2a.answered?.taskId ?? null,
    a2aContextId: a2a.contextId ?? a2a.answered?.contextId ?? null,
  };
}
