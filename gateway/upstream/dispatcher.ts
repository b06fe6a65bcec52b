// The undici dispatcher every upstream call goes through. Its connector resolves the host
// itself, checks every resolved address against the SSRF guard, and then connects to the
// checked address only: the name is never resolved a second time, so DNS rebinding (public
// at create time, 127.0.0.1 at connect time) cannot reach the inside. Redirects are never
// followed (no redirect interceptor is composed in).
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { Agent, buildConnector } from 'undici';
import { isAllowedAddress } from './ssrf.ts';
import { BlockedAddressError } from './errors.ts';

export type ResolvedAddress = { address: string; family: number };
/** Resolves a host name to every address it has (tests pass a rebinding resolver here). */
export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

const systemResolver: Resolver = (hostname) => lookup(hostname, { all: true, verbatim: true });

export type DispatcherOptions = {
  /** UPSTREAM_ALLOW: hosts, host:port pairs or CIDRs exempt from the guard. */
  allow: string[];
  resolver?: Resolver;
  connectTimeoutMs?: number;
  /** Idle keep-alive connections per upstream origin. */
  connections?: number;
};

/**
 * Resolves `hostname` and returns the address to connect to, or throws BlockedAddressError
 * when any resolved address is internal and not allowed (a name that resolves to both a
 * public and a private address is refused: we cannot know which one a later lookup favours).
 */
export async function resolveChecked(
  hostname: string,
  port: string,
  allow: string[],
  resolver: Resolver,
): Promise<ResolvedAddress> {
  const host = hostname.replace(/^\[|\]$/g, '');
  const addresses = isIP(host) ? [{ address: host, family: isIP(host) }] : await resolver(host);
  if (addresses.length === 0) throw Object.assign(new Error('no address'), { code: 'ENOTFOUND' });
  for (const { address } of addresses) {
    if (!isAllowedAddress(host, address, port, allow)) throw new BlockedAddressError();
  }
  return addresses[0];
}

/**
 * A connector that resolves the host through the guard and connects to the checked address
 * only. `tls`: client certificate and trust for HTTPS origins (the facilitator client's).
 */
export function checkedConnector(opts: {
  allow: string[];
  resolver?: Resolver;
  connectTimeoutMs?: number;
  tls?: { cert: string; key: string; ca?: string };
}): buildConnector.connector {
  const resolver = opts.resolver ?? systemResolver;
  const base = buildConnector({
    timeout: opts.connectTimeoutMs ?? 10_000,
    ...(opts.tls ? { ...opts.tls, rejectUnauthorized: true } : {}),
  });
  return (options: buildConnector.Options, callback) => {
    const port = String(options.port || (options.protocol === 'https:' ? 443 : 80));
    resolveChecked(options.hostname, port, opts.allow, resolver).then(
      ({ address }) => {
        const host = options.hostname.replace(/^\[|\]$/g, '');
        // TLS keeps the name for SNI and certificate checks while the socket goes to the checked address.
        const servername =
          options.protocol === 'https:' && !isIP(host) ? (options.servername ?? host) : options.servername;
        base({ ...options, hostname: address, servername }, callback);
      },
      (err: Error) => callback(err, null),
    );
  };
}

export function createUpstreamDispatcher(opts: DispatcherOptions): Agent {
  return new Agent({
    connect: checkedConnector(opts),
    keepAliveTimeout: 10_000,
    connections: opts.connections ?? 256,
    // The gateway speaks HTTP/1.1 upstream; h2 would need its own refused-stream handling.
    allowH2: false,
  });
}
