// A fake DNS for the SSRF tests (named so): it only decides which address a name resolves to,
// and can answer differently on each lookup, as a rebinding attacker's server does.
import type { Resolver } from '../../gateway/upstream/dispatcher.ts';

/** Fake DNS: each lookup of a name returns the next answer in its script (the last one repeats). */
export function rebindingResolver(script: Record<string, string[][]>): Resolver & { lookups: string[] } {
  const counts = new Map<string, number>();
  const lookups: string[] = [];
  const resolver = async (hostname: string) => {
    lookups.push(hostname);
    const answers = script[hostname];
    if (!answers) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
    const n = counts.get(hostname) ?? 0;
    counts.set(hostname, n + 1);
    return answers[Math.min(n, answers.length - 1)].map((address) => ({
      address,
      family: address.includes(':') ? 6 : 4,
    }));
  };
  return Object.assign(resolver, { lookups });
}
