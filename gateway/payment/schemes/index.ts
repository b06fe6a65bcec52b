// The registry of the payment schemes the gateway offers, by name: each scheme's folder beside
// this file holds its gateway part (schemes/<name>/: its challenge entry and its verifier) over
// its protocol part (x402/schemes/<name>/). The gate asks here for the challenge entries of a
// price and for the scheme a payment is verified by.
import type { ChallengeEntry } from '../../../x402/schemas.ts';
import type { PaymentConfig } from '../config.ts';
import type { Price } from '../pricing.ts';
import type { GatewayScheme } from './scheme.ts';
import { exactGatewayScheme } from './exact/index.ts';

/** Offered in this order: a challenge's `accepts` lists them so. */
const SCHEMES: readonly GatewayScheme[] = [exactGatewayScheme];

/** The `accepts` entries of a challenge for this price at `resource`: one per scheme offered. */
export function challengeEntries(config: PaymentConfig, price: Price, resource: string): ChallengeEntry[] {
  return SCHEMES.map((scheme) => scheme.challengeEntry(config, price, resource));
}

/** The scheme named `name`, or null when the gateway offers no scheme of that name. */
export function gatewayScheme(name: string): GatewayScheme | null {
  return SCHEMES.find((scheme) => scheme.protocol.name === name) ?? null;
}
