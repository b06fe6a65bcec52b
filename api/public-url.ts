// The URL a caller reached: what an x402 challenge carries as its `resource`. Behind a
// TLS-terminating load balancer the request the API sees is plain HTTP to an internal address,
// so the public one comes from PUBLIC_URL when it is set, else (TRUST_PROXY=true) from the
// X-Forwarded-Proto / X-Forwarded-Host the load balancer writes, else from the request itself.
// Forwarded headers are read only with TRUST_PROXY: anyone can send them, and a caller must not
// choose the URL the gateway names in its challenges. When a proxy appends to a list instead of
// setting the header, the last entry (written by the nearest proxy) counts.
import { isIPv6 } from 'node:net';
import type { Context } from 'koa';
import type { GatewayConfig } from '../gateway/config.ts';

// host, host:port, or a bracketed IPv6 address with an optional port; nothing else.
const HOST =
  /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/;

/** The last entry of a header a proxy may have appended to, when it is well formed. */
function forwarded(ctx: Context, name: string, valid: (value: string) => boolean): string | undefined {
  const value = ctx.get(name).split(',').pop()?.trim() ?? '';
  return value && valid(value) ? value : undefined;
}

/** The absolute public base URL callers reach the API on (scheme, host, PUBLIC_URL's path prefix). */
export function publicBaseUrl(ctx: Context, address: GatewayConfig['publicAddress']): string {
  if (address.url) return address.url;
  // The app runs with app.proxy off, so ctx.protocol and ctx.host are the connection's own.
  let protocol = ctx.protocol;
  let host = ctx.host;
  if (address.trustProxy) {
    protocol = forwarded(ctx, 'x-forwarded-proto', (v) => v === 'http' || v === 'https') ?? protocol;
    host = forwarded(ctx, 'x-forwarded-host', (v) => HOST.test(v)) ?? host;
  }
  return `${protocol}://${host}`;
}

/** The absolute public URL of this request (scheme, host, path and query). */
export function publicRequestUrl(ctx: Context, address: GatewayConfig['publicAddress']): string {
  return `${publicBaseUrl(ctx, address)}${ctx.originalUrl}`;
}

/**
 * The caller's network address as unauthenticated traffic is rate limited by it: the
 * connection's, or with TRUST_PROXY the last X-Forwarded-For entry (written by the nearest
 * proxy), keyed by clientKey.
 */
export function clientAddress(ctx: Context, address: GatewayConfig['publicAddress']): string {
  const socket = ctx.req.socket.remoteAddress ?? 'unknown';
  if (!address.trustProxy) return clientKey(socket);
  return clientKey(forwarded(ctx, 'x-forwarded-for', (v) => /^[0-9A-Fa-f:.]{2,45}$/.test(v)) ?? socket);
}

/** How many hextets an IPv6 address part holds (an embedded IPv4 address is two). */
const hextets = (parts: string[]) => parts.reduce((n, part) => n + (part.includes('.') ? 2 : 1), 0);

/**
 * One rate-limit identity per client: an IPv4 address as it is (an IPv4-mapped IPv6 one as its
 * IPv4 address), an IPv6 address by its /64 prefix, the smallest block a site is usually given:
 * a caller holding a /64 cannot multiply its buckets by rotating the interface part.
 */
export function clientKey(address: string): string {
  const ip = address.split('%')[0];
  if (!isIPv6(ip)) return address;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped) return mapped[1];
  const [head, tail] = ip.split('::');
  const headParts = head ? head.split(':') : [];
  const tailParts = tail ? tail.split(':') : [];
  const zeros = tail === undefined ? 0 : 8 - hextets(headParts) - hextets(tailParts);
  const groups = [...headParts, ...Array<string>(zeros).fill('0'), ...tailParts];
  return `${groups
    .slice(0, 4)
    .map((group) => parseInt(group, 16).toString(16))
    .join(':')}::/64`;
}
