// The registry of the payment schemes the protocol layer knows, by name. A scheme is a folder
// beside this file (its wire schemas and pure checks); adding one adds its entry here, and its
// parts to the gateway's (gateway/payment/schemes/) and the facilitator's (facilitator/schemes/)
// registries.
import type { SchemeProtocol } from './scheme.ts';
import { exactProtocol } from './exact/index.ts';
import { uptoProtocol } from './upto/index.ts';
import { batchSettlementProtocol } from './batch-settlement/index.ts';

const PROTOCOLS: ReadonlyMap<string, SchemeProtocol> = new Map(
  [exactProtocol, uptoProtocol, batchSettlementProtocol].map((scheme) => [scheme.name, scheme]),
);

/** The scheme named `name`, or null when no scheme of that name is known. */
export function schemeProtocol(name: string): SchemeProtocol | null {
  return PROTOCOLS.get(name) ?? null;
}
