// An A2A agent's call as the gateway sees it: the body must be one JSON-RPC 2.0 request (as for
// MCP, gateway/jsonrpc/request.ts); its method, in either spelling (methods.ts), the skill its
// message names and the tasks it is about become the call's facts for policy, prices, task
// binding and records. A method the gateway does not know is refused unless the agent passes
// unknown methods; a streaming method (its answer is Server-Sent Events) needs the streaming
// endpoint. Every refusal is a JsonRpcRequestError (A2aRequestError is one).
import { JSON_RPC_MEMBERS, JsonRpcRequestError, parseJsonRpcRequest, refuseCaseVariants } from '../jsonrpc/request.ts';
import { a2aRequestFacts, type A2aRequestFacts } from './methods.ts';

/** The facts of one request, and its JSON-RPC id. */
export type A2aRequest = A2aRequestFacts & { rpcId: string | number | undefined };

/** What the agent allows, and which endpoint the request came to. */
export type A2aRequestContext = { passUnknownMethods: boolean; streamingEndpoint: boolean };

export function parseA2aRequestBody(body: Buffer, context: A2aRequestContext): A2aRequest {
  const { request, parsed } = parseJsonRpcRequest(body, 'A2A');
  const { method, params, id } = request;
  const message = (params as { message?: { metadata?: unknown } } | undefined)?.message;
  refuseCaseVariants('A2A', [
    [parsed, JSON_RPC_MEMBERS],
    [params, ['message', 'id', 'taskId']],
    [message, ['taskId', 'referenceTaskIds', 'contextId', 'metadata']],
    [message?.metadata, ['skill']],
  ]);
  if (method.includes('\u0000')) throw new JsonRpcRequestError('A2A method names must not contain NUL characters');
  const facts = a2aRequestFacts(method, params);
  if (!facts.method && !context.passUnknownMethods)
    throw new JsonRpcRequestError(`A2A method ${method.slice(0, 100)} is not passed for this agent`);
  if (facts.streaming && !context.streamingEndpoint)
    throw new JsonRpcRequestError(`A2A method ${method} answers as a stream: call the streaming endpoint`);
  return { ...facts, rpcId: id };
}
