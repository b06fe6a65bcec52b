// The JSON-RPC 2.0 envelope MCP and A2A requests share: a proxied call to an MCP or an A2A agent
// is exactly one JSON-RPC request, whose members the gateway reads for policy, prices, task
// binding and records. A body that is not one is refused with a JsonRpcRequestError, whose
// message is safe to show the caller (the door answers it 400).
import { z } from 'zod';
import { nestsDeeperThan } from '../../lib/json-depth.ts';

/** A request that is not one the gateway passes: the caller's mistake, said in `message`. */
export class JsonRpcRequestError extends Error {}

/** How deep a JSON-RPC request may nest (tool arguments and message parts may legitimately nest). */
const MAX_JSON_RPC_DEPTH = 64;

const JsonRpcRequest = z.object({
  jsonrpc: z.literal('2.0'),
  method: z.string().min(1).max(256),
  id: z.union([z.string(), z.number()]).optional(),
  params: z.unknown().optional(),
});

/** One request as parsed: its members, and the whole value (other keys included). */
export type ParsedRequest = { request: z.infer<typeof JsonRpcRequest>; parsed: unknown };

/** The body as one JSON-RPC 2.0 request; `protocol` (`MCP`, `A2A`) names it in the refusals. */
export function parseJsonRpcRequest(body: Buffer, protocol: string): ParsedRequest {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw new JsonRpcRequestError(`${protocol} body must be a JSON-RPC 2.0 request`);
  }
  if (nestsDeeperThan(parsed, MAX_JSON_RPC_DEPTH))
    throw new JsonRpcRequestError(`${protocol} body nests deeper than ${MAX_JSON_RPC_DEPTH} levels`);
  const request = JsonRpcRequest.safeParse(parsed);
  if (!request.success) throw new JsonRpcRequestError(`${protocol} body must be a single JSON-RPC 2.0 request`);
  return { request: request.data, parsed };
}

/**
 * A key of `where` that is one of `names` in other letter case (`Method`, `NAME`), or null. Go's
 * encoding/json, which many MCP and A2A servers decode with, matches keys ignoring case: such
 * a key is what that upstream reads, unseen by the gateway's prices, policy and task binding.
 */
export function caseVariantKey(where: unknown, names: readonly string[]): string | null {
  if (where === null || typeof where !== 'object' || Array.isArray(where)) return null;
  const lower = new Set(names.map((name) => name.toLowerCase()));
  return Object.keys(where).find((key) => !names.includes(key) && lower.has(key.toLowerCase())) ?? null;
}

/** The JSON-RPC request's own members. */
export const JSON_RPC_MEMBERS = ['jsonrpc', 'method', 'id', 'params'] as const;

/** Refuses the first key of the (object, names) pairs that only a case-blind reader takes for a name. */
export function refuseCaseVariants(protocol: string, checks: Array<[unknown, readonly string[]]>): void {
  for (const [where, names] of checks) {
    const key = caseVariantKey(where, names);
    if (key !== null)
      throw new JsonRpcRequestError(
        `${protocol} body has ${JSON.stringify(key.slice(0, 100))}: keys are case-sensitive`,
      );
  }
}
