// A /settle request for an `upto` payment, in either envelope a facilitator is sent: the x402 v2
// one (`paymentPayload` is the client's v2 payment, `paymentRequirements.amount` the charge) or the
// v1-style one the gateway's facilitator client sends for `exact` (`paymentPayload` carries
// `scheme`, `network` and the upto `payload`, an EIP-2612 permit in its `extensions`;
// `paymentRequirements.maxAmountRequired` is the charge). Both become one form: the v2 payment
// (a v1-style one given the `accepted` entry its requirements imply) and the charge.
import { z } from 'zod';
import { HexAddress, Uint256String } from '../../schemas.ts';
import { SCHEME_UPTO, UptoPayment } from './schemas.ts';

/** What the facilitator settles for an upto payment: the payment, and what the resource server charges. */
export type UptoSettleRequest = {
  scheme: typeof SCHEME_UPTO;
  /** The envelope's version, as sent (1: the v1-style envelope, 2: x402 v2). */
  x402Version: 1 | 2;
  /** The requirements' network, as sent (a v1 name or CAIP-2). */
  network: string;
  payment: UptoPayment;
  /** The requirements' asset and payee, which the authorization must name. */
  asset: string;
  payTo: string;
  /** The actual charge (decimal token units): at most the authorization's permitted amount; 0 moves nothing. */
  charge: string;
};

const RequirementsV2 = z.looseObject({
  scheme: z.literal(SCHEME_UPTO),
  network: z.string().min(1),
  amount: Uint256String,
  asset: HexAddress,
  payTo: HexAddress,
});

const SettleV2 = z.object({
  x402Version: z.literal(2),
  paymentPayload: UptoPayment,
  paymentRequirements: RequirementsV2,
});

const RequirementsV1 = z.looseObject({
  scheme: z.literal(SCHEME_UPTO),
  network: z.string().min(1),
  maxAmountRequired: Uint256String,
  asset: HexAddress,
  payTo: HexAddress,
  maxTimeoutSeconds: z.number().int().nonnegative(),
});

const SettleV1 = z.object({
  x402Version: z.literal(1),
  paymentPayload: z.looseObject({
    scheme: z.literal(SCHEME_UPTO),
    network: z.string().min(1),
    payload: UptoPayment.shape.payload,
    extensions: UptoPayment.shape.extensions,
  }),
  paymentRequirements: RequirementsV1,
});

/** The request in its one form; null when the body is neither envelope carrying an upto payment. */
export function parseUptoSettleRequest(body: unknown): UptoSettleRequest | null {
  const v2 = SettleV2.safeParse(body);
  if (v2.success) {
    const { paymentPayload: payment, paymentRequirements: r } = v2.data;
    return {
      scheme: SCHEME_UPTO,
      x402Version: 2,
      network: r.network,
      payment,
      asset: r.asset,
      payTo: r.payTo,
      charge: r.amount,
    };
  }
  const v1 = SettleV1.safeParse(body);
  if (!v1.success) return null;
  const { paymentPayload: sent, paymentRequirements: r } = v1.data;
  const payment: UptoPayment = {
    x402Version: 2,
    // The terms the payer signed for, as a v2 payment names them; the verifier checks them against ours.
    accepted: {
      scheme: SCHEME_UPTO,
      network: sent.network,
      amount: sent.payload.permit2Authorization.permitted.amount,
      asset: r.asset,
      payTo: r.payTo,
      maxTimeoutSeconds: Math.max(r.maxTimeoutSeconds, 1),
    },
    payload: sent.payload,
    ...(sent.extensions ? { extensions: sent.extensions } : {}),
  };
  return {
    scheme: SCHEME_UPTO,
    x402Version: 1,
    network: r.network,
    payment,
    asset: r.asset,
    payTo: r.payTo,
    charge: r.maxAmountRequired,
  };
}

/** The (scheme, network) a v2 settle body names, read loosely; null when it is no v2 body. */
export function v2SettleKind(body: unknown): { scheme: string; network: string } | null {
  const parsed = z
    .object({
      x402Version: z.literal(2),
      paymentRequirements: z.looseObject({ scheme: z.string(), network: z.string() }),
    })
    .safeParse(body);
  return parsed.success ? parsed.data.paymentRequirements : null;
}
