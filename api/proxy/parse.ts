// Parse stage. For protocol=mcp the body must be exactly one JSON-RPC 2.0 request; its
// method (and, for tools/call, the tool name) drive policy, per-tool prices and records.
// A payment carried the x402 MCP transport's way, in `params._meta["x402/payment"]`, is taken
// out here: the gate reads it, and the upstream gets the request re-serialized without that one
// key (the only change the gateway ever makes to a forwarded body; other bodies go as sent).
import { z } from 'zod';
import { badRequest } from '../errors.ts';
import type { McpCall } from './call.ts';
import { MAX_MCP_DEPTH, nestsDeeperThan } from '../json-depth.ts';

export const JsonRpcRequest = z.object({
  jsonrpc: z.literal('2.0'),
  method: z.string().min(1).max(256),
  id: z.union([z.string(), z.number()]).optional(),
  params: z.unknown().optional(),
});

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

/** A 400 naming the first key of the (object, names) pairs that only a case-blind reader takes for a name. */
export function refuseCaseVariants(protocol: string, checks: Array<[unknown, readonly string[]]>): void {
  for (const [where, names] of checks) {
    const key = caseVariantKey(where, names);
    if (key !== null)
      throw badRequest(`${protocol} body has ${JSON.stringify(key.slice(0, 100))}: keys are case-sensitive`);
  }
}

export function parseMcpBody(body: Buffer): McpCall {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body.toString('utf8'));
  } catch {
    throw badRequest('MCP body must be a JSON-RPC 2.0 request');
  }
  if (nestsDeeperThan(parsed, MAX_MCP_DEPTH)) throw badRequest(`MCP body nests deeper than ${MAX_MCP_DEPTH} levels`);
  const request = JsonRpcRequest.safeParse(parsed);
  if (!request.success) throw badRequest('MCP body must be a single JSON-RPC 2.0 request');
  const params = request.data.params as { name?: unknown } | undefined;
  refuseCaseVariants('MCP', [
    [parsed, JSON_RPC_MEMBERS],
    [params, ['name']],
  ]);
  const tool =
    request.data.method === 'tools/call' && typeof params?.name === 'string' ? params.name.slice(0, 256) : null;
  // Both are recorded as text, which PostgreSQL cannot hold with U+0000 in it.
  if (request.data.method.includes('\u0000') || tool?.includes('\u0000'))
    throw badRequest('MCP method and tool names must not contain NUL characters');
  return { method: request.data.method, tool, rpcId: request.data.id, ...paymentInMeta(parsed as JsonRpc, body) };
}

/** The key of the x402 MCP transport's payment in a request's `params._meta`. */
const PAYMENT_META_KEY = 'x402/payment';

/**
 * The largest request that may carry a payment in `_meta`: a paid tools/call is small, and its
 * re-serialization (one object per number, below) is then bounded whatever the 32 MiB body cap.
 */
const MAX_PAID_MCP_BODY = 64 * 1024;

/**
 * `"x402/payment":` as a JSON object key, each character as written or as a `\uXXXX` escape
 * (`/` also as `\/`): JSON.parse keeps only the last of duplicate keys, so the raw text is
 * counted too, and a key the parsed request does not show is never forwarded.
 */
const PAYMENT_KEY_TEXT = new RegExp(
  `"${[...PAYMENT_META_KEY]
    .map((c) => {
      const hex = c.charCodeAt(0).toString(16).padStart(4, '0');
      const escaped = `\\\\u${[...hex].map((h) => (/[a-f]/.test(h) ? `[${h}${h.toUpperCase()}]` : h)).join('')}`;
      return `(?:${c === '/' ? '\\/|\\\\/' : c}|${escaped})`;
    })
    .join('')}"\\s*:`,
  'g',
);

type JsonRpc = { params?: { _meta?: Record<string, unknown> } };

function paymentInMeta(request: JsonRpc, body: Buffer): Pick<McpCall, 'payment' | 'forwardBody'> {
  const meta = request.params?._meta;
  const present = !!meta && typeof meta === 'object' && !Array.isArray(meta) && Object.hasOwn(meta, PAYMENT_META_KEY);
  const text = body.toString('utf8');
  const written = text.match(PAYMENT_KEY_TEXT)?.length ?? 0;
  if (written !== (present ? 1 : 0))
    throw badRequest('MCP body has a duplicate or hidden x402/payment key (only one, in params._meta)');
  if (!present) return {};
  if (body.length > MAX_PAID_MCP_BODY)
    throw badRequest(
      `an MCP request with x402/payment in params._meta must be at most ${MAX_PAID_MCP_BODY / 1024} KiB`,
    );
  const payment = meta[PAYMENT_META_KEY];
  // Parsed again keeping every number's own text, so the re-serialized request says exactly what
  // the caller's did (no rounding past 2^53, `1.0` stays `1.0`), less the payment.
  const exact = parseKeepingNumbers(text) as Required<JsonRpc>;
  delete exact.params._meta![PAYMENT_META_KEY];
  return { payment, forwardBody: Buffer.from(JSON.stringify(exact), 'utf8') };
}

type Reviver = (this: unknown, key: string, value: unknown) => unknown;
/** JSON.rawJSON and the reviver's source text (Node 21+; not yet in TypeScript's lib). */
const rawJson = (JSON as unknown as { rawJSON(text: string): unknown }).rawJSON;

function keepNumberText(_key: string, value: unknown, context?: { source?: string }): unknown {
  return typeof value === 'number' && context?.source !== undefined ? rawJson(context.source) : value;
}

/** JSON.parse whose numbers JSON.stringify writes back as they were written (throws as JSON.parse does). */
export function parseKeepingNumbers(text: string): unknown {
  return JSON.parse(text, keepNumberText as Reviver) as unknown;
}
