// SSRF guard at create time: the URL's literal host. (The proxy checks the resolved address
// again at connect time.) UPSTREAM_ALLOW names hosts or CIDRs that are exempt.
import { BlockList, isIP } from 'node:net';

const internal = new BlockList();
internal.addSubnet('0.0.0.0', 8, 'ipv4');
internal.addSubnet('10.0.0.0', 8, 'ipv4');
internal.addSubnet('100.64.0.0', 10, 'ipv4');
internal.addSubnet('127.0.0.0', 8, 'ipv4');
internal.addSubnet('169.254.0.0', 16, 'ipv4');
internal.addSubnet('172.16.0.0', 12, 'ipv4');
internal.addSubnet('192.168.0.0', 16, 'ipv4');
internal.addSubnet('192.0.0.0', 24, 'ipv4'); // IETF protocol assignments
internal.addSubnet('198.18.0.0', 15, 'ipv4'); // benchmarking networks, often routed internally
internal.addSubnet('224.0.0.0', 4, 'ipv4');
internal.addSubnet('240.0.0.0', 4, 'ipv4');
internal.addAddress('::', 'ipv6');
internal.addAddress('::1', 'ipv6');
internal.addSubnet('fc00::', 7, 'ipv6');
internal.addSubnet('fe80::', 10, 'ipv6');
internal.addSubnet('fec0::', 10, 'ipv6'); // deprecated site-local, still routed by some stacks
internal.addSubnet('ff00::', 8, 'ipv6');

/** Expands an IPv6 address to its eight 16-bit groups (handles `::` and a dotted IPv4 tail). */
function ipv6Groups(address: string): number[] | undefined {
  let text = address.toLowerCase().split('%')[0];
  const v4tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (v4tail) {
    const o = v4tail[1].split('.').map(Number);
    text = text.slice(0, -v4tail[1].length) + `${((o[0] << 8) | o[1]).toString(16)}:${((o[2] << 8) | o[3]).toString(16)}`;
  }
  const [head, tail] = text.split('::');
  const parse = (part: string | undefined) => (part ? part.split(':').map((g) => parseInt(g, 16)) : []);
  const front = parse(head);
  const back = text.includes('::') ? parse(tail) : [];
  const fill = 8 - front.length - back.length;
  if (fill < 0 || (!text.includes('::') && fill !== 0)) return undefined;
  const groups = [...front, ...new Array(fill).fill(0), ...back];
  return groups.every((g) => Number.isInteger(g) && g >= 0 && g <= 0xffff) ? groups : undefined;
}

const dotted = (hi: number, lo: number) => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;

/**
 * IPv6 forms that carry an IPv4 address are judged by that address: IPv4-mapped
 * (::ffff:a.b.c.d) and -compatible (::a.b.c.d), NAT64 (64:ff9b::/96) and 6to4 (2002::/16).
 */
function embeddedIpv4(address: string): string | undefined {
  const g = ipv6Groups(address);
  if (!g) return undefined;
  const zeros = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  if (zeros(0, 5) && (g[5] === 0xffff || (g[5] === 0 && (g[6] !== 0 || g[7] > 1)))) return dotted(g[6], g[7]);
  if (g[0] === 0x64 && g[1] === 0xff9b && zeros(2, 6)) return dotted(g[6], g[7]);
  if (g[0] === 0x2002) return dotted(g[1], g[2]);
  return undefined;
}

export function isInternalAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return internal.check(address, 'ipv4');
  if (family === 6) {
    const v4 = embeddedIpv4(address);
    if (v4) return internal.check(v4, 'ipv4');
    return internal.check(address, 'ipv6');
  }
  return true; // not an address at all: refuse rather than guess
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

export function isAllowedUpstream(raw: string, allow: string[]): boolean {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return false;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return false;
  if (!url.hostname || url.username || url.password) return false;
  // WHATWG URL parsing already normalises decimal, octal and hex IPv4 forms to dotted quads.
  // A trailing dot names the same host (`localhost.`), so it is judged without it.
  const host = url.hostname.replace(/^\[|\]$/g, '').replace(/\.$/, '').toLowerCase();
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  if (matchesAllow(host, allow, port)) return true;
  if (host === 'localhost' || host.endsWith('.localhost')) return false;
  if (isIP(host)) return !isInternalAddress(host);
  return true;
}

/** Connect-time check of a resolved address, with the same allow-list (entries may name the host or the address). */
export function isAllowedAddress(host: string, address: string, port: string, allow: string[]): boolean {
  if (matchesAllow(host, allow, port) || matchesAllow(address, allow, port)) return true;
  return !isInternalAddress(address);
}
