// The terms every scheme's challenge entry states for a price, in the order x402 v1 clients
// (x402-fetch, x402-axios) are shown them: an absolute `resource` URL, `description` and
// `mimeType` strings, the checksummed payee, this chain's token; `outputSchema` is left out
// rather than null. Each scheme adds its `extra`.
import { checksummed } from '../../../x402/address.ts';
import type { ChallengeEntry } from '../../../x402/schemas.ts';
import type { PaymentConfig } from '../config.ts';
import type { Price } from '../pricing.ts';

export function entryTerms(
  config: PaymentConfig,
  scheme: string,
  price: Price,
  resource: string,
): Omit<ChallengeEntry, 'extra'> {
  return {
    scheme,
    network: config.network,
    maxAmountRequired: price.amount,
    resource,
    description: price.description,
    mimeType: price.mimeType,
    payTo: checksummed(price.payTo),
    maxTimeoutSeconds: config.maxTimeoutSeconds,
    asset: config.domain.verifyingContract,
  };
}
