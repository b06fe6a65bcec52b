// The registry of the payment schemes the gateway offers, by name: each scheme's folder beside
// this file holds its gateway part (schemes/<name>/: its challenge entry and its verifier) over
// its protocol part (x402/schemes/<name>/). The gate asks here for the challenge entries of a
// price (its scheme's) and for the scheme a payment is verified by.
import type { ChallengeEntry } from '../../../x402/schemas.ts';
import type { PaymentConfig } from '../config.ts';
import type { Price } from '../pricing.ts';
import { PaymentUnavailable } from '../unavailable.ts';
import type { SupportedKind } from '../supported.ts';
import type { GatewayScheme } from './scheme.ts';
import { exactGatewayScheme } from './exact/index.ts';
import { uptoGatewayScheme } from './upto/index.ts';
import { batchSettlementGatewayScheme } from './batch-settlement/index.ts';

/** Every scheme the gateway can verify, in the order a challenge's `accepts` would list them. */
const SCHEMES: readonly GatewayScheme[] = [exactGatewayScheme, uptoGatewayScheme, batchSettlementGatewayScheme];

/**
 * The `accepts` entries of a challenge for this price at `resource`: the entry of the price's
 * scheme. `facilitator` is the tenant facilitator's kinds, read (../supported.ts) when the scheme
 * `readsFacilitator`. Throws PaymentUnavailable when that scheme's entry cannot be offered now
 * (the kinds unread, or no kind the scheme needs): the gate fails closed.
 */
export function challengeEntries(
  config: PaymentConfig,
  price: Price,
  resource: string,
  facilitator: readonly SupportedKind[] | null = null,
): ChallengeEntry[] {
  const scheme = gatewayScheme(price.scheme);
  const entry = scheme?.challengeEntry(config, price, resource, facilitator);
  if (!entry) throw new PaymentUnavailable(`no ${price.scheme} payment can be offered now`);
  return [entry];
}

/** The scheme named `name`, or null when the gateway offers no scheme of that name. */
export function gatewayScheme(name: string): GatewayScheme | null {
  return SCHEMES.find((scheme) => scheme.protocol.name === name) ?? null;
}
