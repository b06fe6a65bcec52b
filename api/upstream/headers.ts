// Which caller headers may reach an upstream. A block-list (documented in docs/ARCHITECTURE.md):
// hop-by-hop headers, everything that authenticates the caller to us, and our own controls.
const BLOCKED = new Set([
  'authorization',
  'cookie',
  'host',
  'connection',
  'keep-alive',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'content-length', // recomputed by the client for the forwarded body
  'expect',
  'x-payment',
]);

const BLOCKED_PREFIXES = ['proxy-', 'x-gateway-'];

export function forwardableHeaders(incoming: Record<string, string | string[] | undefined>): Record<string, string> {
  // Connection may name further hop-by-hop headers (RFC 9110 §7.6.1).
  const named = new Set(
    String(incoming.connection ?? '')
      .split(',')
      .map((h) => h.trim().toLowerCase())
      .filter(Boolean),
  );
  const out: Record<string, string> = {};
  for (const [rawName, value] of Object.entries(incoming)) {
    const name = rawName.toLowerCase();
    if (value === undefined || BLOCKED.has(name) || named.has(name)) continue;
    if (BLOCKED_PREFIXES.some((prefix) => name.startsWith(prefix))) continue;
    out[name] = Array.isArray(value) ? value.join(', ') : value;
  }
  return out;
}

/** Response headers that must not be copied back to the caller. */
export function forwardableResponseHeaders(incoming: Record<string, string | string[] | undefined>): Record<string, string | string[]> {
  const named = new Set(
    String(incoming.connection ?? '')
      .split(',')
      .map((h) => h.trim().toLowerCase())
      .filter(Boolean),
  );
  const out: Record<string, string | string[]> = {};
  for (const [rawName, value] of Object.entries(incoming)) {
    const name = rawName.toLowerCase();
    if (value === undefined || named.has(name)) continue;
    if (['connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'proxy-authenticate', 'proxy-connection', 'content-length'].includes(name)) continue;
    out[name] = value;
  }
  return out;
}
