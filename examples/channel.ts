// Pays an agent from a payment channel (x402 `batch-settlement`): the tenant puts `npm start`'s
// demo echo agent behind the gateway at a per-call price, paid from channels; a payer with
// @x402/fetch and @x402/evm's batch-settlement client, unmodified, deposits once (the gateway
// hands the deposit to the tenant's facilitator, which pulls it on chain) and pays every later
// call with a voucher the gateway checks itself, with no chain round trip. The example makes
// CALLS streamed calls and prints the latency of each kind (the deposit call, the voucher calls),
// what the channel was charged and the payer's balance, which moves once, for the deposit. The
// tenant's settlement must be configured (docs/API.md "x402 payments", steps 1 and 2): its
// facilitator is the channel's receiver authorizer.
// Settings: examples/settings.ts (GATEWAY_URL, TOKEN, PAYER_PRIVATE_KEY, TOKEN_ADDRESS), and
//   UPSTREAM_URL  the agent sold (default http://127.0.0.1:8099/, npm start's echo agent)
//   PAY_TO        who is paid (default: a new address, printed)
//   PRICE         one call's price, in USDC units (default 1000, 0.001 USDC)
//   CALLS         how many calls (default 100); the deposit pays for all of them
// Run against `npm start`:
//   npm run example:channel
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { x402Client } from '@x402/core/client';
import { decodePaymentResponseHeader } from '@x402/core/http';
import { toClientEvmSigner } from '@x402/evm';
import { BatchSettlementEvmScheme } from '@x402/evm/batch-settlement/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { createPublicClient, erc20Abi, http } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { api, fail, gatewaySettings, usage } from './settings.ts';

usage(`usage: npm run example:channel
  Sells npm start's echo agent at a price per call paid from payment channels (x402
  batch-settlement) and makes CALLS (default 100) paid calls with @x402/fetch and @x402/evm's
  batch-settlement client from one deposit, printing the latency of each kind of call and the
  payer's balance. Settings: examples/settings.ts.`);
const env = process.env;
const s = gatewaySettings();
const payerKey = (env.PAYER_PRIVATE_KEY ??
  fail('PAYER_PRIVATE_KEY is not set: a key funded with dev USDC (npm run dev -- fund ADDRESS)', 2)) as `0x${string}`;
if (!/^0x[0-9a-fA-F]{64}$/.test(payerKey)) fail('PAYER_PRIVATE_KEY must be 0x and 64 hex digits', 2);
const tokenAddress = (env.TOKEN_ADDRESS ?? '0x5FbDB2315678afecb367f032d93F642f64180aa3') as `0x${string}`;
const chainRpcUrl = env.CHAIN_RPC_URL ?? 'http://127.0.0.1:8545';
const price = env.PRICE ?? '1000';
if (!/^[1-9][0-9]*$/.test(price)) fail('PRICE must be a positive whole number of USDC units', 2);
const calls = Number(env.CALLS ?? '100');
if (!Number.isInteger(calls) || calls < 1 || calls > 10_000) fail('CALLS must be a whole number from 1 to 10000', 2);
const payTo = env.PAY_TO ?? privateKeyToAccount(generatePrivateKey()).address;
const deposit = (BigInt(price) * BigInt(calls)).toString();

// 1. The seller: the echo agent at PRICE a call, paid from channels of at least CALLS calls.
const agent = await api<{ id: string }>(s, 'POST', '/v1/agents', 201, {
  name: `channel-echo-${randomUUID().slice(0, 8)}`,
  upstream_url: env.UPSTREAM_URL ?? 'http://127.0.0.1:8099/',
  pricing: {
    scheme: 'batch-settlement',
    amount: price,
    asset: 'USDC',
    network: 'base',
    pay_to: payTo,
    min_deposit: deposit,
    withdraw_delay: 900,
  },
  // The calls come back to back, each a request and its paid retry: more than the default
  // bucket (50 a second, 100 at once) lets through once vouchers are this quick.
  rate_limit_rps: 500,
  rate_limit_burst: 1000,
});
console.log(`agent ${agent.id} sells the echo agent at ${price} USDC units a call, paid from channels`);

// 2. The payer: the unmodified batch-settlement client (it reads its channel on chain when it has no record).
const chain = createPublicClient({ transport: http(chainRpcUrl) });
const account = privateKeyToAccount(payerKey);
const signer = toClientEvmSigner(account, chain as unknown as Parameters<typeof toClientEvmSigner>[1]);
const client = new x402Client().register('eip155:*', new BatchSettlementEvmScheme(signer));
client.setSpendControls({ allowedAssets: [{ network: 'eip155:8453', asset: tokenAddress }] });
const pay = wrapFetchWithPayment(fetch, client);
const balance = () =>
  chain.readContract({ address: tokenAddress, abi: erc20Abi, functionName: 'balanceOf', args: [account.address] });
const before = await balance();

// 3. CALLS streamed calls, each timed from the first request to the last byte of its answer
// (@x402/fetch asks once unpaid, for the 402, then pays).
const latencies: Record<'deposit' | 'voucher', number[]> = { deposit: [], voucher: [] };
let channel: string | null = null;
for (let i = 0; i < calls; i++) {
  const started = performance.now();
  const res = await pay(`${s.gateway}/v1/proxy/${agent.id}/stream`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${s.token}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ call: i }),
  });
  const answer = await res.text();
  const elapsed = performance.now() - started;
  const receipt = res.headers.get('payment-response');
  if (res.status !== 200 || !receipt)
    fail(
      `call ${i + 1} answered ${res.status}: ${answer}` +
        (res.status === 503
          ? '\n(a channel names the tenant facilitator as its receiver authorizer: configure the tenant\'s settlement first, docs/API.md "x402 payments", steps 1 and 2)'
          : ''),
    );
  const settled = decodePaymentResponseHeader(receipt);
  const state = (settled.extra as { channelState?: { channelId: string } } | undefined)?.channelState;
  channel ??= state?.channelId ?? null;
  latencies[settled.transaction ? 'deposit' : 'voucher'].push(elapsed);
}

const quantile = (values: number[], q: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
};
for (const [kind, values] of Object.entries(latencies)) {
  if (values.length === 0) continue;
  console.log(
    `${kind} calls: ${values.length}, p50 ${quantile(values, 0.5).toFixed(1)} ms, p95 ${quantile(values, 0.95).toFixed(1)} ms, max ${Math.max(...values).toFixed(1)} ms`,
  );
}
const after = await balance();
console.log(`channel ${channel}: ${calls} calls charged from one deposit of ${deposit} USDC units`);
console.log(`payer ${account.address}: ${before} before, ${after} after (moved ${before - after}, the deposit)`);
if (before - after !== BigInt(deposit)) process.exit(1);
