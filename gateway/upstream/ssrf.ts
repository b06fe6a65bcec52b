// SSRF guard at create time: the URL's literal host. (The proxy checks the resolved address
// again at connect time.) UPSTREAM_ALLOW names hosts or CIDRs that are exempt. Which ranges
// count as internal comes from ipaddr.js's special-purpose range names, not a hand-kept list.
import { BlockList, isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

// ipaddr.js names every special-purpose range of the IANA registries; only addresses routed on
// the public internet pass. AS112 and AMT are public anycast services, so they count as public.
const PUBLIC_V4 = new Set(['unicast', 'as112', 'amt']);
const PUBLIC_V6 = new Set(['unicast', 'as112v6', 'amt']);

function v4At(parts: number[], index: number): ipaddr.IPv4 {
  return new ipaddr.IPv4([parts[index] >> 8, parts[index] & 255, parts[index + 1] >> 8, parts[index + 1] & 255]);
}

/** Why an address is internal, in the words an error message uses; null for a public address. */
type InternalClass = 'loopback' | 'private' | 'link-local' | 'unspecified' | 'reserved';

const CLASS_OF_RANGE: Record<string, InternalClass> = {
  loopback: 'loopback',
  private: 'private',
  carrierGradeNat: 'private',
  uniqueLocal: 'private',
  linkLocal: 'link-local',
  unspecified: 'unspecified',
};

function classOf(range: string, publicRanges: Set<string>): InternalClass | null {
  return publicRanges.has(range) ? null : (CLASS_OF_RANGE[range] ?? 'reserved');
}

/**
 * IPv6 forms that carry an IPv4 address are judged by that address: IPv4-mapped (::ffff:0:0/96),
 * well-known NAT64 (64:ff9b::/96) and 6to4 (2002::/16). Forms nothing here should reach are
 * refused outright: IPv4-translated (::ffff:0:0:0/96), local-use NAT64 (64:ff9b:1::/48), the
 * deprecated IPv4-compatible ::a.b.c.d, Teredo, discard-only (100::/64) and the rest of the
 * special-purpose registry.
 */
function internalClassV6(address: ipaddr.IPv6): InternalClass | null {
  const parts = address.parts;
  const range = address.range();
  if (range === 'ipv4Mapped') return internalClassV4(address.toIPv4Address());
  if (range === '6to4') return internalClassV4(v4At(parts, 1));
  if (range === 'rfc6052') return parts[2] !== 0 ? 'reserved' : internalClassV4(v4At(parts, 6)); // 64:ff9b:1::/48 is local use
  // ::a.b.c.d, and :: / ::1 themselves
  if (parts.slice(0, 6).every((p) => p === 0))
    return range === 'loopback' || range === 'unspecified' ? range : 'reserved';
  return classOf(range, PUBLIC_V6);
}

function internalClassV4(address: ipaddr.IPv4): InternalClass | null {
  return classOf(address.range(), PUBLIC_V4);
}

/** What kind of internal address this is; null when it is public. Anything not an address is `reserved`. */
function internalClass(address: string): InternalClass | null {
  const bare = address.split('%')[0]; // a zone id names a link: only link-local addresses carry one
  if (!isIP(bare)) return 'reserved'; // not an address at all: refuse rather than guess
  if (bare !== address) return 'link-local';
  // Parsed from WHATWG URL's canonical form: ipaddr.js reads a dotted tail as IPv4-mapped even
  // without ffff (`::8.8.8.8` would pass as ::ffff:8.8.8.8).
  const parsed = ipaddr.parse(isIP(bare) === 6 ? new URL(`http://[${bare}]/`).hostname.slice(1, -1) : bare);
  return parsed.kind() === 'ipv4' ? internalClassV4(parsed as ipaddr.IPv4) : internalClassV6(parsed as ipaddr.IPv6);
}

export function isInternalAddress(address: string): boolean {
  return internalClass(address) !== null;
}

/** An allow-list entry is a host, a CIDR, or a host:port (only that port of the host). */
function matchesAllow(host: string, allow: string[], port?: string): boolean {
  for (const entry of allow) {
    const hostPort = /^(.+):(\d+)$/.exec(entry);
    if (hostPort && !entry.includes('/') && isIP(entry) !== 6) {
      if (port !== undefined && hostPort[1].toLowerCase() === host.toLowerCase() && hostPort[2] === port) return true;
      continue;
    }
    if (entry.includes('/')) {
      const [net, bits] = entry.split('/');
      const family = isIP(net);
      if (family && isIP(host) === family) {
        const list = new BlockList();
        list.addSubnet(net, Number(bits), family === 4 ? 'ipv4' : 'ipv6');
        if (list.check(host, family === 4 ? 'ipv4' : 'ipv6')) return true;
      }
    } else if (entry.toLowerCase() === host.toLowerCase()) {
      return true;
    }
  }
  return false;
}

/**
 * Why an upstream URL is refused at create time, or null when it is allowed: `url` (not an
 * absolute URL), `scheme` (not http or https), `host` (none), `credentials` (user or password
 * in the URL), `localhost`, or an internal literal address and its class. `hostPort` is the
 * UPSTREAM_ALLOW entry that would admit it.
 */
export type UpstreamRefusal =
  | { cause: 'url' | 'scheme' | 'host' | 'credentials' }
  | { cause: 'localhost'; hostPort: string }
  | { cause: 'internal'; class: InternalClass; hostPort: string };

export function upstreamRefusal(raw: string, allow: string[]): UpstreamRefusal | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { cause: 'url' };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return { cause: 'scheme' };
  if (!url.hostname) return { cause: 'host' };
  if (url.username || url.password) return { cause: 'credentials' };
  // WHATWG URL parsing already normalises decimal, octal and hex IPv4 forms to dotted quads.
  // A trailing dot names the same host (`localhost.`), so it is judged without it.
  const host = url.hostname
    .replace(/^\[|\]$/g, '')
    .replace(/\.$/, '')
    .toLowerCase();
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  if (matchesAllow(host, allow, port)) return null;
  // An allow-list entry names an IPv6 address bare (all ports), others with the port.
  const hostPort = isIP(host) === 6 ? host : `${host}:${port}`;
  if (host === 'localhost' || host.endsWith('.localhost')) return { cause: 'localhost', hostPort };
  if (!isIP(host)) return null;
  const internal = internalClass(host);
  return internal ? { cause: 'internal', class: internal, hostPort } : null;
}

export function isAllowedUpstream(raw: string, allow: string[]): boolean {
  return upstreamRefusal(raw, allow) === null;
}

/** Connect-time check of a resolved address, with the same allow-list (entries may name the host or the address). */
export function isAllowedAddress(host: string, address: string, port: string, allow: string[]): boolean {
  if (matchesAllow(host, allow, port) || matchesAllow(address, allow, port)) return true;
  return !isInternalAddress(address);
}
