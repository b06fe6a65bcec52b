// Parse stage of an A2A agent's call: the body must be one JSON-RPC 2.0 request (as for MCP);
// its method, in either spelling (gateway/a2a/methods.ts), the skill its message names and the
// tasks it is about become the call's facts for policy, prices, task binding and records. A
// method the gateway does not know is a 400 unless the agent passes unknown methods; a
// streaming method (its answer is Server-Sent Events) needs the streaming endpoint.
import { badRequest, ApiError } from '../errors.ts';
import { MAX_MCP_DEPTH, nestsDeeperThan } from '../json-depth.ts';
import { A2aRequestError, a2aRequestFacts } from '../../gateway/a2a/methods.ts';
import { taskCaller, type TaskBindings } from '../../gateway/a2a/tasks.ts';
import type { Agent } from '../../gateway/db/entities.ts';
import type { A2aCall, ProxyCall } from './call.ts';
import { JSON_RPC_MEMBERS, JsonRpcRequest, refuseCaseVariants } from './parse.ts';

export function parseA2aBody(body: Buffer, agent: Agent, mode: ProxyCall['mode']): A2aCall {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw badRequest('A2A body must be a JSON-RPC 2.0 request');
  }
  if (nestsDeeperThan(parsed, MAX_MCP_DEPTH)) throw badRequest(`A2A body nests deeper than ${MAX_MCP_DEPTH} levels`);
  const request = JsonRpcRequest.safeParse(parsed);
  if (!request.success) throw badRequest('A2A body must be a single JSON-RPC 2.0 request');
  const { method, params, id } = request.data;
  const message = (params as { message?: { metadata?: unknown } } | undefined)?.message;
  refuseCaseVariants('A2A', [
    [parsed, JSON_RPC_MEMBERS],
    [params, ['message', 'id', 'taskId']],
    [message, ['taskId', 'referenceTaskIds', 'contextId', 'metadata']],
    [message?.metadata, ['skill']],
  ]);
  if (method.includes('\u0000')) throw badRequest('A2A method names must not contain NUL characters');
  let facts;
  try {
    facts = a2aRequestFacts(method, params);
  } catch (err) {
    if (err instanceof A2aRequestError) throw badRequest(err.message);
    throw err;
  }
  if (!facts.method && !agent.a2aPassUnknownMethods)
    throw badRequest(`A2A method ${method.slice(0, 100)} is not passed for this agent`);
  if (facts.streaming && mode === 'transactional')
    throw badRequest(`A2A method ${method} answers as a stream: call the streaming endpoint`);
  return { ...facts, rpcId: id };
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
