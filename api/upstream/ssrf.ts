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
internal.addSubnet('224.0.0.0', 4, 'ipv4');
internal.addSubnet('240.0.0.0', 4, 'ipv4');
internal.addAddress('::', 'ipv6');
internal.addAddress('::1', 'ipv6');
internal.addSubnet('fc00::', 7, 'ipv6');
internal.addSubnet('fe80::', 10, 'ipv6');
internal.addSubnet('ff00::', 8, 'ipv6');

/** IPv4-mapped and -compatible IPv6 forms are judged by their IPv4 address. */
function embeddedIpv4(address: string): string | undefined {
  const m = /^::(?:ffff:)?(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (m) return m[1];
  const hex = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/i.exec(address);
  if (hex) {
    const hi = parseInt(hex[1], 16);
    const lo = parseInt(hex[2], 16);
    return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  }
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
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  if (matchesAllow(host, allow, port)) return true;
  if (host === 'localhost' || host.endsWith('.localhost')) return false;
  if (isIP(host)) return !isInternalAddress(host);
  return true;
}

/** Connect-time check of a resolved address, with the same allow-list. */
export function isAllowedAddress(host: string, address: string, port: string, allow: string[]): boolean {
  if (matchesAllow(host, allow, port) || matchesAllow(address, allow, port)) return true;
  return !isInternalAddress(address);
}
