// Which headers cross the gateway. Requests use a block-list, not a pass-all (docs/API.md
// "Invocations"), documented in docs/PROXY.md. Blocked on the way up:
// - hop-by-hop (RFC 9110 §7.6.1): Connection and every header it names, Keep-Alive, TE,
//   Trailer, Transfer-Encoding, Upgrade, Proxy-* (Proxy-Authorization, Proxy-Connection…);
// - what authenticates the caller to us or belongs to us: Authorization, Cookie, the x402
//   payment of either dialect (X-PAYMENT, PAYMENT-SIGNATURE), every X-Gateway-* header;
// - what the client recomputes or the gateway cannot vouch for: Host, Content-Length (the
//   streaming route re-adds the caller's own when it pipes the body unchanged), Expect,
//   Forwarded, X-Forwarded-*, X-Real-IP.
// The agent's credential and X-Request-ID are added by the caller of these functions.
// W3C trace context (traceparent, tracestate) is not blocked: with tracing off the caller's
// passes unchanged; with tracing on the upstream client replaces traceparent with its own span's
// (lib/observability/spans.ts), which continues the caller's trace.
import { LRUCache } from 'lru-cache';
const HOP_BY_HOP = ['connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade'];
const BLOCKED_REQUEST = new Set([
  ...HOP_BY_HOP,
  'authorization',
  'cookie',
  'host',
  'content-length',
  'expect',
  'x-payment',
  'payment-signature',
  'x-request-id',
  'forwarded',
  'x-real-ip',
  'http2-settings',
]);
const BLOCKED_REQUEST_PREFIXES = ['proxy-', 'x-gateway-', 'x-forwarded-'];

// On the way down: hop-by-hop headers, anything that would pass for the gateway's own, and
// anything that acts on the gateway's whole origin, which every tenant's agents share: cookies
// (one agent could set or clear another's), Clear-Site-Data, Alt-Svc (redirects the origin's
// future traffic), HSTS and key pinning, Service-Worker-Allowed, and CORS grants.
const BLOCKED_RESPONSE = new Set([
  ...HOP_BY_HOP,
  'proxy-authenticate',
  'proxy-connection',
  'x-payment-response',
  'payment-response',
  'payment-required',
  'x-request-id',
  'set-cookie',
  'set-cookie2',
  'clear-site-data',
  'alt-svc',
  'strict-transport-security',
  'public-key-pins',
  'public-key-pins-report-only',
  'expect-ct',
  'service-worker-allowed',
]);
const BLOCKED_RESPONSE_PREFIXES = ['x-gateway-', 'access-control-'];

type Incoming = Record<string, string | string[] | undefined>;

const NONE: ReadonlySet<string> = new Set();
// Parsed Connection values: a client sends the same one (`keep-alive`) on every request, and
// parsing it twice per streamed call showed in its profile. A caller sending a new value each
// time only evicts the least recently used.
const parsedConnection = new LRUCache<string, ReadonlySet<string>>({ max: 64 });

/** Header names listed in Connection are hop-by-hop too. */
function connectionNamed(incoming: Incoming): ReadonlySet<string> {
  const value = incoming.connection;
  if (value === undefined) return NONE;
  const text = Array.isArray(value) ? value.join(',') : value;
  let named = parsedConnection.get(text);
  if (!named) {
    named = new Set(
      text
        .split(',')
        .map((h) => h.trim().toLowerCase())
        .filter(Boolean),
    );
    parsedConnection.set(text, named);
  }
  return named;
}

export function forwardableHeaders(incoming: Incoming): Record<string, string> {
  const named = connectionNamed(incoming);
  const out: Record<string, string> = {};
  for (const [rawName, value] of Object.entries(incoming)) {
    const name = rawName.toLowerCase();
    if (value === undefined || BLOCKED_REQUEST.has(name) || named.has(name)) continue;
    if (BLOCKED_REQUEST_PREFIXES.some((prefix) => name.startsWith(prefix))) continue;
    out[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}

/** Response headers copied back to a streaming caller. */
export function forwardableResponseHeaders(incoming: Incoming): Record<string, string | string[]> {
  const named = connectionNamed(incoming);
  const out: Record<string, string | string[]> = {};
  for (const [rawName, value] of Object.entries(incoming)) {
    const name = rawName.toLowerCase();
    if (value === undefined || BLOCKED_RESPONSE.has(name) || named.has(name)) continue;
    if (BLOCKED_RESPONSE_PREFIXES.some((prefix) => name.startsWith(prefix))) continue;
    out[name] = value;
  }
  return out;
}

/**
 * X-Request-ID: the caller's is honoured when it is a plausible id (1–200 visible ASCII
 * characters, so it cannot smuggle line breaks into logs or headers); otherwise one is made.
 */
export function requestIdFrom(value: string | undefined, make: () => string): string {
  return value && /^[\x21-\x7e]{1,200}$/.test(value) ? value : make();
}
