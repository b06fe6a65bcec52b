// x402 `batch-settlement` payments for tests, signed by the unmodified reference client
// (@x402/core's x402Client with @x402/evm's BatchSettlementEvmScheme): a 402 challenge offering
// `batch-settlement`, the first payment (a deposit with its voucher), later vouchers (the client's
// own channel record says what it has deposited and been charged), and a cooperative refund
// request, which the client only sends over HTTP (a stand-in fetch answers its probe and keeps
// the payment it sends).
import { x402Client } from '@x402/core/client';
import type { PaymentPayload, PaymentRequired, SettleResponse } from '@x402/core/types';
import {
  decodePaymentSignatureHeader,
  encodePaymentRequiredHeader,
  encodePaymentResponseHeader,
} from '@x402/core/http';
import { toClientEvmSigner } from '@x402/evm';
import { BatchSettlementEvmScheme, InMemoryClientChannelStorage } from '@x402/evm/batch-settlement/client';
import { Signature } from 'ethers';
import { privateKeyToAccount } from 'viem/accounts';
import { BatchSettlementPayment } from '../../x402/schemes/batch-settlement/schemas.ts';
import { stack } from './stack.ts';
import { rpcReader } from './upto.ts';

const BATCH_NETWORK = 'eip155:8453';

export type BatchTerms = {
  asset: string;
  payTo: string;
  receiverAuthorizer: string;
  /** The price of one call, in token units. */
  amount: bigint;
  withdrawDelay?: number;
  /** `extra.minDeposit`: what the client deposits on its first call. */
  minDeposit?: bigint;
  maxTimeoutSeconds?: number;
};

export function batchChallenge(terms: BatchTerms) {
  return {
    x402Version: 2 as const,
    resource: { url: 'https://gateway.test/paid', description: 'metered call', mimeType: 'application/json' },
    accepts: [
      {
        scheme: 'batch-settlement',
        network: BATCH_NETWORK as `${string}:${string}`,
        amount: String(terms.amount),
        asset: terms.asset,
        payTo: terms.payTo,
        maxTimeoutSeconds: terms.maxTimeoutSeconds ?? 300,
        extra: {
          name: 'USD Coin',
          version: '2',
          receiverAuthorizer: terms.receiverAuthorizer,
          withdrawDelay: terms.withdrawDelay ?? 900,
          ...(terms.minDeposit === undefined ? {} : { minDeposit: String(terms.minDeposit) }),
        },
      },
    ],
  };
}

/**
 * A payer: the reference client over one key, with its own channel record (no chain reader, so
 * it never looks the channel up; `record` tells it what the server settled). Its channels name
 * its key as their payer authorizer, unless `payerAuthorizer` says another (the zero address:
 * none, so the contract checks the payer's signature as SignatureChecker does: its key, or its
 * ERC-1271 answer once the address has code).
 */
export function batchPayer(privateKey: string, opts: { payerAuthorizer?: `0x${string}` } = {}) {
  const account = privateKeyToAccount(privateKey as `0x${string}`);
  const storage = new InMemoryClientChannelStorage();
  const scheme = new BatchSettlementEvmScheme(toClientEvmSigner(account), { storage, ...opts });
  const client = new x402Client().register('eip155:*', scheme);
  const parsed = (wire: unknown) => BatchSettlementPayment.parse(JSON.parse(JSON.stringify(wire)));
  return {
    address: account.address,
    /** The payment the client builds for `terms`: a deposit first, then vouchers. */
    async pay(terms: BatchTerms) {
      client.setSpendControls({ allowedAssets: [{ network: BATCH_NETWORK, asset: terms.asset }] });
      const wire = await client.createPaymentPayload(batchChallenge(terms));
      return parsed(wire);
    },
    /** What a successful settle response tells the client: its channel's escrow and charged total. */
    async record(channelId: string, state: { balance: bigint; charged: bigint }) {
      await storage.set(channelId, {
        balance: String(state.balance),
        chargedCumulativeAmount: String(state.charged),
      });
    },
    /** The refund request the client sends for `terms` (all of the unclaimed escrow without `amount`). */
    async refund(terms: BatchTerms, amount?: bigint) {
      const sent: string[] = [];
      const challenge = encodePaymentRequiredHeader(batchChallenge(terms) as never);
      const fetch = async (_url: string | URL | Request, init?: RequestInit) => {
        const signature = new Headers(init?.headers).get('PAYMENT-SIGNATURE');
        if (!signature) return new Response(null, { status: 402, headers: { 'PAYMENT-REQUIRED': challenge } });
        sent.push(signature);
        const settled = encodePaymentResponseHeader({ success: true, transaction: '0x', network: BATCH_NETWORK });
        return new Response('{}', { status: 200, headers: { 'PAYMENT-RESPONSE': settled } });
      };
      await scheme.refund('https://gateway.test/paid', {
        fetch: fetch as typeof globalThis.fetch,
        ...(amount === undefined ? {} : { amount: String(amount) }),
      });
      return parsed(decodePaymentSignatureHeader(sent[0]!));
    },
  };
}

/**
 * The unmodified client a payer runs against the stack: @x402/core's x402Client with
 * BatchSettlementEvmScheme over `privateKey`, reading the stack's chain (so a client with no
 * record of its channel recovers it from the chain and a corrective answer), a channel record of
 * its own, the local token allowed.
 */
export function channelBuyer(privateKey: string): x402Client {
  const signer = toClientEvmSigner(
    privateKeyToAccount(privateKey as `0x${string}`),
    rpcReader(stack().infra.chainRpcUrl) as Parameters<typeof toClientEvmSigner>[1],
  );
  const scheme = new BatchSettlementEvmScheme(signer, { storage: new InMemoryClientChannelStorage() });
  const client = new x402Client().register('eip155:*', scheme);
  client.setSpendControls({ allowedAssets: [{ network: 'eip155:8453', asset: stack().infra.tokenAddress }] });
  return client;
}

/** The order of secp256k1's group: s and n - s sign the same message. */
const SECP256K1_N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;

/** The same signature with s replaced by n - s and v flipped: ecrecover takes it, OpenZeppelin's ECDSA does not. */
export function highS(signature: string): string {
  const sig = Signature.from(signature);
  const s = (SECP256K1_N - BigInt(sig.s)).toString(16).padStart(64, '0');
  return `${sig.r}${s}${(sig.v === 27 ? 28 : 27).toString(16)}`;
}

/** A voucher payload whose signature is well formed but not the payer's (one byte of `r` changed). */
export function forgedVoucher<P extends { payload: Record<string, unknown> }>(payment: P): P {
  const copy = structuredClone(payment) as P & { payload: { voucher: { signature: string } } };
  const sig = copy.payload.voucher.signature;
  copy.payload.voucher.signature = `${sig.slice(0, 10)}${sig[10] === '0' ? '1' : '0'}${sig.slice(11)}`;
  return copy;
}

/**
 * What a paid answer over a JSON-RPC transport tells the client's scheme, as the reference x402
 * MCP client hands it over: the receipt it keeps its channel's state from, or the PaymentRequired
 * it recovers from; answers whether it recovered.
 */
export async function handBack(
  buyer: x402Client,
  payload: PaymentPayload,
  answer: { settleResponse?: SettleResponse; paymentRequired?: PaymentRequired },
): Promise<boolean> {
  const outcome = await buyer.handlePaymentResponse({
    paymentPayload: payload,
    requirements: payload.accepted,
    ...(answer.settleResponse ? { settleResponse: answer.settleResponse } : {}),
    ...(answer.paymentRequired ? { paymentRequired: answer.paymentRequired } : {}),
  });
  return outcome?.recovered === true;
}
