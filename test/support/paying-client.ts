// An unmodified x402 client paying as a payer, wrapped around fetch the way a payer runs one,
// over a fetch that remembers what each request carried and how it was answered: a test can see
// that the client signed once, or send the payment it made again.
import type { Wallet } from 'ethers';
import { privateKeyToAccount } from 'viem/accounts';
import { createSigner, wrapFetchWithPayment as wrapV1 } from 'x402-fetch';
import { x402Client } from '@x402/core/client';
import { registerExactEvmScheme } from '@x402/evm/exact/client';
import { wrapFetchWithPayment as wrapV2 } from '@x402/fetch';
import { stack } from './stack.ts';
import { CHAIN_ID, v2PayerClient } from './x402.ts';

/**
 * - `x402-fetch`: the x402 v1 client (x402-fetch 1.x: X-PAYMENT), paying at most its `maxValue`;
 * - `v2-only`: @x402/fetch 2.x over an x402Client with ExactEvmScheme for every eip155 network
 *   (PAYMENT-SIGNATURE; v2PayerClient);
 * - `default`: @x402/fetch 2.x over the client registerExactEvmScheme makes, v2 with its v1
 *   fallback.
 */
type PayingClientKind = 'x402-fetch' | 'v2-only' | 'default';

/** A request the client sent: its answer's status and the payment headers it carried (null: none). */
type SentRequest = { status: number; xPayment: string | null; signature: string | null };

/** @x402/evm's default registration (v2 with its v1 fallback) paying as `payer`, the local token allowed. */
function defaultPayerClient(payer: Wallet): x402Client {
  const client = registerExactEvmScheme(new x402Client(), {
    signer: privateKeyToAccount(payer.privateKey as `0x${string}`),
  });
  // The local test token is none of the client's default assets: allowed explicitly.
  client.setSpendControls({ allowedAssets: [{ network: `eip155:${CHAIN_ID}`, asset: stack().infra.tokenAddress }] });
  return client;
}

/** `kind` paying as `payer` (the v1 client at most `maxValue` test units a call): `pay` is its fetch, `sent` what went out. */
export function payingFetch(
  kind: PayingClientKind,
  payer: Wallet,
  maxValue = 1_000_000n,
): { pay: typeof fetch; sent: SentRequest[] } {
  const sent: SentRequest[] = [];
  const recording: typeof fetch = async (input, init) => {
    const request = new Request(input, init);
    const xPayment = request.headers.get('x-payment');
    const signature = request.headers.get('payment-signature');
    const res = await fetch(request);
    sent.push({ status: res.status, xPayment, signature });
    return res;
  };
  if (kind === 'x402-fetch') {
    let signer: ReturnType<typeof createSigner> | undefined;
    const pay: typeof fetch = async (input, init) => {
      signer ??= createSigner('base', payer.privateKey as `0x${string}`);
      return (wrapV1(recording, await signer, maxValue) as typeof fetch)(input, init);
    };
    return { sent, pay };
  }
  const client = kind === 'v2-only' ? v2PayerClient(payer) : defaultPayerClient(payer);
  return { sent, pay: wrapV2(recording, client) };
}
