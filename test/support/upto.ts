// x402 `upto` payments for tests, signed by the unmodified reference client (@x402/core's
// x402Client with @x402/evm's UptoEvmScheme): a 402 challenge offering `upto`, and the payment
// the client builds for it. With `sponsoring`, the challenge declares eip2612GasSponsoring, so a
// payer without a Permit2 allowance also signs an EIP-2612 permit (the client reads the token's
// allowance and the payer's permit nonce through `reader`).
import { x402Client } from '@x402/core/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { toClientEvmSigner } from '@x402/evm';
import { UptoEvmScheme } from '@x402/evm/upto/client';
import { createPublicClient, http } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { MaxUint256, type JsonRpcProvider, type Wallet } from 'ethers';
import { UptoPayment } from '../../x402/schemes/upto/schemas.ts';
import { tokenContract } from '../../scripts/dev/chain.ts';
import { PERMIT2_ADDRESS } from '../../contracts/permit2.ts';
import { stack } from './stack.ts';
import { CHAIN_ID, newWallet } from './x402.ts';
import { waitForInvocation } from './http.ts';
import { waitFor } from './wait.ts';
import { waitForRow } from './proxy-helpers.ts';
import { startDueCharges } from '../../temporal/charges-due.ts';
import { createLogger } from '../../lib/log.ts';

export const UPTO_NETWORK = 'eip155:8453';

export type UptoTerms = {
  asset: string;
  payTo: string;
  facilitator: string;
  /** The maximum, in token units. */
  amount: bigint;
  maxTimeoutSeconds?: number;
  sponsoring?: boolean;
};

/** What the client asks the chain: the token's `allowance` and `nonces`. */
type ContractReader = { readContract: (args: { functionName: string; args?: readonly unknown[] }) => Promise<unknown> };

export function uptoChallenge(terms: UptoTerms) {
  return {
    x402Version: 2 as const,
    resource: { url: 'https://gateway.test/paid', description: 'metered call', mimeType: 'application/json' },
    accepts: [
      {
        scheme: 'upto',
        network: UPTO_NETWORK as `${string}:${string}`,
        amount: String(terms.amount),
        asset: terms.asset,
        payTo: terms.payTo,
        maxTimeoutSeconds: terms.maxTimeoutSeconds ?? 3600,
        extra: { name: 'USD Coin', version: '2', facilitatorAddress: terms.facilitator },
      },
    ],
    ...(terms.sponsoring
      ? {
          extensions: {
            eip2612GasSponsoring: {
              info: { description: 'The facilitator submits an EIP-2612 permit for Permit2.', version: '1' },
            },
          },
        }
      : {}),
  };
}

/** A reader over a JSON-RPC node, as a client with a public client configured has one. */
export function rpcReader(rpcUrl: string): ContractReader {
  return createPublicClient({ transport: http(rpcUrl) }) as unknown as ContractReader;
}

/** The payment the reference client builds for `terms`, parsed with our wire schema. */
export async function signUptoPayment(privateKey: string, terms: UptoTerms, reader?: ContractReader) {
  return payUptoChallenge(privateKey, uptoChallenge(terms), reader);
}

/** The payment the reference client builds for a v2 PaymentRequired offering `upto` (a gateway's 402). */
export async function payUptoChallenge(
  privateKey: string,
  challenge: ReturnType<typeof uptoChallenge> | Record<string, unknown>,
  reader?: ContractReader,
) {
  const account = privateKeyToAccount(privateKey as `0x${string}`);
  const signer = toClientEvmSigner(account, reader as Parameters<typeof toClientEvmSigner>[1]);
  const client = new x402Client().register('eip155:*', new UptoEvmScheme(signer));
  const accepts = (challenge as { accepts: Array<{ network: string; asset: string }> }).accepts;
  client.setSpendControls({
    allowedAssets: accepts.map((entry) => ({ network: entry.network as `${string}:${string}`, asset: entry.asset })),
  });
  const wire = await client.createPaymentPayload(challenge as Parameters<x402Client['createPaymentPayload']>[0]);
  return { wire, payment: UptoPayment.parse(JSON.parse(JSON.stringify(wire))) };
}

/**
 * A payer on the stack's chain holding `usdc` (and ETH for gas); `approved`: it approved Permit2
 * itself, else the upto client signs an EIP-2612 permit beside its payment.
 */
export async function uptoPayer(provider: JsonRpcProvider, usdc: bigint, approved = true): Promise<Wallet> {
  const payer = await newWallet({ eth: true, usdc }, provider);
  if (approved)
    await (await tokenContract(stack().infra.tokenAddress, payer).approve(PERMIT2_ADDRESS, MaxUint256)).wait();
  return payer;
}

/** The invocation (read with the tenant's token) once its metered charge is no longer due or settling. */
export async function settledInvocation(
  token: string,
  agentId: string,
  invocationId: string,
): Promise<Record<string, unknown>> {
  let last: Record<string, unknown> | undefined;
  return waitFor(
    async () => {
      last = await waitForInvocation(token, agentId, invocationId);
      return last?.payment_settlement && last.payment_settlement !== 'settling' && last;
    },
    { timeoutMs: 60_000, everyMs: 100, what: `the charge of ${invocationId}`, state: () => JSON.stringify(last) },
  );
}

/**
 * Runs the due-charges round (temporal/charges-due.ts) with no waiting periods until the lost
 * stream `invocationId`'s charge is settled, then once more (a second round must change nothing).
 */
export async function settleLostCharge(invocationId: string): Promise<void> {
  const round = startDueCharges({
    orm: stack().orm,
    temporal: stack().temporal,
    taskQueue: stack().config.temporal.taskQueue,
    log: createLogger('test', 'error'),
    everyMs: 3_600_000,
    streamedAfterMs: 0,
    lostAfterMs: 0,
  });
  try {
    await waitFor(
      async () => (await round.runOnce()) >= 0 && (await waitForRow(invocationId)).paymentSettlement === 'settled',
      { timeoutMs: 60_000, what: `the charge of ${invocationId} settled` },
    );
    await round.runOnce();
  } finally {
    await round.stop();
  }
}

/** The unmodified @x402/fetch client with @x402/evm's upto scheme, paying as `payer` on the stack's chain. */
export function uptoFetch(payer: Wallet): typeof fetch {
  const signer = toClientEvmSigner(
    privateKeyToAccount(payer.privateKey as `0x${string}`),
    rpcReader(stack().infra.chainRpcUrl) as Parameters<typeof toClientEvmSigner>[1],
  );
  const client = new x402Client().register('eip155:*', new UptoEvmScheme(signer));
  client.setSpendControls({ allowedAssets: [{ network: `eip155:${CHAIN_ID}`, asset: stack().infra.tokenAddress }] });
  return wrapFetchWithPayment(fetch, client);
}
