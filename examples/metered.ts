// Sells an agent priced by use (x402 `upto`) and pays it: the tenant puts `npm start`'s demo
// chat endpoint (OpenAI-shaped, reporting its token usage) behind the gateway with a tokens
// meter and a maximum per call; a payer with @x402/fetch and @x402/evm's upto client,
// unmodified, signs a Permit2 authorization for the maximum (with an EIP-2612 permit when it
// never approved Permit2) and streams a chat completion; once the answer is complete the gateway
// settles the charge its meter measured, never more than the maximum, and the example prints
// the maximum, the charge, its transaction and the payer's balance before and after. The
// tenant's settlement must be configured (docs/API.md "x402 payments", steps 1 and 2): an upto
// payment names the facilitator that will charge it, read from the tenant's facilitator.
// Settings: examples/settings.ts (GATEWAY_URL, TOKEN, PAYER_PRIVATE_KEY, TOKEN_ADDRESS), and
//   DEMO_CHAT_URL  the chat endpoint sold (default http://127.0.0.1:8099/v1/chat/completions)
//   PAY_TO         who is paid (default: a new address, printed)
//   MAX_PAYMENT    the most one call may cost, in USDC units (default 100000, 0.1 USDC)
//   BODY           the user message (default "hello")
// Run against `npm start`:
//   npm run example:metered
import { randomUUID } from 'node:crypto';
import { x402Client } from '@x402/core/client';
import { toClientEvmSigner } from '@x402/evm';
import { UptoEvmScheme } from '@x402/evm/upto/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { createPublicClient, erc20Abi, http } from 'viem';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { api, fail, gatewaySettings, usage } from './settings.ts';

usage(`usage: npm run example:metered
  Sells npm start's demo chat endpoint as an agent priced by use (x402 upto, a tokens meter) and
  pays one streamed chat completion with @x402/fetch and @x402/evm's upto client, printing the
  maximum, the charge and the payer's balance. Settings: examples/settings.ts.`);
const env = process.env;
const s = gatewaySettings();
const payerKey = (env.PAYER_PRIVATE_KEY ??
  fail('PAYER_PRIVATE_KEY is not set: a key funded with dev USDC (npm run dev -- fund ADDRESS)', 2)) as `0x${string}`;
if (!/^0x[0-9a-fA-F]{64}$/.test(payerKey)) fail('PAYER_PRIVATE_KEY must be 0x and 64 hex digits', 2);
const tokenAddress = (env.TOKEN_ADDRESS ?? '0x5FbDB2315678afecb367f032d93F642f64180aa3') as `0x${string}`;
const chainRpcUrl = env.CHAIN_RPC_URL ?? 'http://127.0.0.1:8545';
const maximum = env.MAX_PAYMENT ?? '100000';
if (!/^[1-9][0-9]*$/.test(maximum)) fail('MAX_PAYMENT must be a positive whole number of USDC units', 2);
const payTo = env.PAY_TO ?? privateKeyToAccount(generatePrivateKey()).address;

// 1. The seller: the demo chat endpoint, priced by the tokens it reports (per 1000 input and
// output tokens: 0.01 and 0.02 USDC), at most MAX_PAYMENT a call.
const agent = await api<{ id: string }>(s, 'POST', '/v1/agents', 201, {
  name: `metered-chat-${randomUUID().slice(0, 8)}`,
  upstream_url: env.DEMO_CHAT_URL ?? 'http://127.0.0.1:8099/v1/chat/completions',
  pricing: {
    scheme: 'upto',
    amount: maximum,
    asset: 'USDC',
    network: 'base',
    pay_to: payTo,
    meter: { kind: 'tokens', input_per_1k: '10000', output_per_1k: '20000' },
  },
});
console.log(`agent ${agent.id} sells the demo chat endpoint priced by use: at most ${maximum} USDC units a call`);

// 2. The payer: the unmodified upto client (it reads the token's allowance and permit nonce).
const chain = createPublicClient({ transport: http(chainRpcUrl) });
const account = privateKeyToAccount(payerKey);
const signer = toClientEvmSigner(account, chain as unknown as Parameters<typeof toClientEvmSigner>[1]);
const client = new x402Client().register('eip155:*', new UptoEvmScheme(signer));
client.setSpendControls({
  allowedAssets: [{ network: 'eip155:8453', asset: tokenAddress, maxAmountPerPayment: maximum }],
});
const balance = () =>
  chain.readContract({ address: tokenAddress, abi: erc20Abi, functionName: 'balanceOf', args: [account.address] });
const before = await balance();

const res = await wrapFetchWithPayment(fetch, client)(`${s.gateway}/v1/proxy/${agent.id}/stream`, {
  method: 'POST',
  headers: { Authorization: `Bearer ${s.token}`, 'Content-Type': 'application/json' },
  body: JSON.stringify({
    model: 'demo',
    stream: true,
    messages: [{ role: 'user', content: env.BODY ?? 'hello' }],
  }),
});
const answer = await res.text();
const invocationId = res.headers.get('x-gateway-invocation-id');
if (!invocationId)
  fail(
    `the streamed call answered ${res.status}: ${answer}` +
      (res.status === 503
        ? '\n(an upto payment names the tenant facilitator\'s address: configure the tenant\'s settlement first, docs/API.md "x402 payments", steps 1 and 2)'
        : ''),
  );
console.log(`streamed answer (${res.status}):\n${answer.trim()}`);

// 3. The charge, settled after the answer: the invocation says where it stands.
type Invocation = {
  status: string;
  payment_max_amount: string | null;
  payment_charge: string | null;
  payment_settlement: string | null;
  payment_settle_error: string | null;
  payment_transaction: string | null;
};
let invocation: Invocation;
for (let waited = 0; ; waited += 250) {
  invocation = await api<Invocation>(s, 'GET', `/v1/proxy/${agent.id}/invocations/${invocationId}`, 200);
  if (invocation.payment_settlement && invocation.payment_settlement !== 'settling') break;
  if (waited > 60_000) fail(`the charge of ${invocationId} is still due after a minute`);
  await new Promise((resolve) => setTimeout(resolve, 250));
}
console.log(
  `invocation ${invocationId} ${invocation.status}: maximum ${invocation.payment_max_amount}, charged ${invocation.payment_charge} USDC units, ${invocation.payment_settlement}` +
    (invocation.payment_transaction ? ` in transaction ${invocation.payment_transaction}` : '') +
    (invocation.payment_settle_error ? ` (${invocation.payment_settle_error})` : ''),
);
const after = await balance();
console.log(`payer ${account.address}: ${before} before, ${after} after (moved ${before - after})`);
if (invocation.payment_settlement !== 'settled') process.exit(1);
