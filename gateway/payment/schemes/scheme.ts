// What a payment scheme is to the gateway: the challenge entry it offers for a price, and how it
// verifies a payment before anything is recorded, settled or forwarded. The gate asks the
// registry (index.ts) for both; it never names a scheme itself.
import type { ChallengeEntry, OfferedPayment, PaymentRequirements } from '../../../x402/schemas.ts';
import type { SchemeProtocol } from '../../../x402/schemes/scheme.ts';
import type { PaymentConfig } from '../config.ts';
import type { Price } from '../pricing.ts';
import type { SupportedKind } from '../supported.ts';

/**
 * A payment as the gate verified it: the checksummed payer and the lowercase nonce that name it
 * (its binding's key with the network and asset); else the precise cause, for the log only.
 * `expired` is the cause of a payment past its window, which may still resume (flow.ts).
 */
export type GateVerifyResult =
  | {
      ok: true;
      payer: string;
      nonce: string;
      /**
       * verifyTerms's: the payer's signature, not checked yet. Nothing may be forwarded before it
       * answers true.
       */
      signed?: () => Promise<boolean>;
    }
  | { ok: false; cause: string };

export type GatewayScheme = {
  /** The scheme's name and payload (x402/schemes/). */
  readonly protocol: SchemeProtocol;
  /**
   * Whether its challenge entry names something only the tenant's facilitator says (its
   * /supported kinds, ../supported.ts): those are read before the entry is built.
   */
  readonly readsFacilitator: boolean;
  /**
   * Charged after the call, for what it measured (x402 `upto`): its payment is verified and bound
   * before the upstream is called and settled only once the answer is complete, never before.
   */
  readonly settlesAfterCall: boolean;
  /**
   * Its payment's verification does not depend on when it is made (no validity window, no
   * on-chain question): the flow may remember a payment verified whole for a few seconds.
   */
  readonly verdictLasts?: boolean;
  /** The v2 extensions its 402 declares when it is offered (none: `{}`). */
  readonly extensions: Readonly<Record<string, unknown>>;
  /**
   * The v1 `accepts` entry of this price for `resource`, as unmodified x402 clients parse it;
   * null when it cannot be offered now (`facilitator`: the tenant facilitator's kinds, null when
   * they could not be read or were not read).
   */
  challengeEntry(
    config: PaymentConfig,
    price: Price,
    resource: string,
    facilitator: readonly SupportedKind[] | null,
  ): ChallengeEntry | null;
  /**
   * Verifies a payment (its payload already parsed by `protocol`) against the requirements it
   * was offered for: now, or at `at` (unix seconds).
   */
  verify(
    config: PaymentConfig,
    payment: OfferedPayment,
    requirements: PaymentRequirements,
    at?: number,
  ): Promise<GateVerifyResult>;
  /**
   * What `verify` checks but the payer's signature, whose check `signed` runs when asked (a
   * voucher admitted on a channel the gateway holds: its check then runs while the call's first
   * write is in flight). Schemes without it are verified whole.
   */
  verifyTerms?(
    config: PaymentConfig,
    payment: OfferedPayment,
    requirements: PaymentRequirements,
  ): Promise<GateVerifyResult>;
  /**
   * A moment (unix seconds) inside the payment's validity window, at which a payment already
   * settled (or whose outcome is unknown) for this very call is judged: the money moved while it
   * was valid. Null when it has none.
   */
  momentInside(config: PaymentConfig, payment: OfferedPayment): number | null;
  /**
   * A scheme charged after its call: why a charge the facilitator did not collect was not, as the
   * chain shows it now (a reason from a fixed set), or null when it cannot tell.
   */
  uncollectedCause?(
    config: PaymentConfig,
    payment: OfferedPayment,
    requirements: PaymentRequirements,
    charge: bigint,
  ): Promise<string | null>;
};
