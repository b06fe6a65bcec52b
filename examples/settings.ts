// What the examples read, and how they report. Settings come from the environment (the agent
// id may also be the first argument), with the defaults of a local `npm start`. Every example:
//   GATEWAY_URL        the gateway API (default http://127.0.0.1:8080)
//   TOKEN              a bearer token of the agent's tenant (npm start's banner exports one)
// The payment examples also (other examples name their own settings at their top):
//   AGENT_ID           a priced agent (`pricing` set), or the first argument
//   PAYER_PRIVATE_KEY  the payer's key (0x and 64 hex digits), funded with dev USDC by
//                      `npm run dev -- fund ADDRESS`; without it, one is made up and printed
//   BODY               what is sent to the agent (default "hello")
//   MAX_PAYMENT        the most the example agrees to pay, in USDC units of 6 decimals
//                      (default 1000000, i.e. 1 USDC)
//   TOKEN_ADDRESS      the USDC token the gateway charges in (default: the token npm start
//                      deploys on its anvil chain; its banner prints it)
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';

/** Where the gateway is and the bearer token calls carry: what every example reads. */
export type Gateway = { gateway: string; token: string };

/** What the payment examples read. */
export type Settings = Gateway & {
  agentId: string;
  payerKey: `0x${string}`;
  body: string;
  maxPayment: bigint;
  tokenAddress: `0x${string}`;
};

/** The token `npm start` deploys on its anvil chain (the first contract of anvil's account 0). */
const DEV_TOKEN_ADDRESS = '0x5FbDB2315678afecb367f032d93F642f64180aa3';

/** Stops the example with one line on stderr and exit status 2 (a setting to fix) or 1. */
export function fail(message: string, status = 1): never {
  process.stderr.write(`${message}\n`);
  process.exit(status);
}

/**
 * `--help` (or `-h`) prints the example's usage and exits 0, before anything is sent; any other
 * argument that starts with `-` is not one the example takes: one line naming it, exit 2.
 */
export function usage(text: string): void {
  const args = process.argv.slice(2);
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(`${text.trimEnd()}\n`);
    process.exit(0);
  }
  const flag = args.find((a) => a.startsWith('-'));
  const command = /npm run (\S+)/.exec(text)?.[1] ?? 'the example';
  if (flag) fail(`${command}: unknown option ${flag} (usage: npm run ${command} -- --help)`, 2);
}

export function gatewaySettings(): Gateway {
  const env = process.env;
  const token =
    env.TOKEN ??
    fail(
      "TOKEN is not set: a bearer token of the agent's tenant (npm start prints one; or npm run token -- --tenant T --user U)",
      2,
    );
  return { gateway: (env.GATEWAY_URL ?? 'http://127.0.0.1:8080').replace(/\/+$/, ''), token };
}

/** A call to the gateway API with the bearer token; exits 1 unless it answers `expected`. */
export async function api<T>(s: Gateway, method: string, path: string, expected: number, json?: unknown): Promise<T> {
  const res = await fetch(`${s.gateway}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${s.token}`,
      ...(json === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: json === undefined ? undefined : JSON.stringify(json),
  });
  const text = await res.text();
  if (res.status !== expected) fail(`${method} ${s.gateway}${path} answered ${res.status}: ${text}`);
  return JSON.parse(text) as T;
}

export function settings(): Settings {
  const env = process.env;
  const gateway = gatewaySettings();
  const payerKey = env.PAYER_PRIVATE_KEY;
  if (!payerKey) {
    const key = generatePrivateKey();
    const address = privateKeyToAccount(key).address;
    fail(
      `PAYER_PRIVATE_KEY is not set. A new payer, funded with dev USDC on npm start's chain:\n` +
        `  export PAYER_PRIVATE_KEY=${key}\n  npm run dev -- fund ${address}`,
      2,
    );
  }
  if (!/^0x[0-9a-fA-F]{64}$/.test(payerKey)) fail('PAYER_PRIVATE_KEY must be 0x and 64 hex digits', 2);
  const agentId =
    process.argv[2] ?? env.AGENT_ID ?? fail('name the priced agent: AGENT_ID=agt_… or its id as the first argument', 2);
  const maxPayment = env.MAX_PAYMENT ?? '1000000';
  if (!/^\d+$/.test(maxPayment)) fail('MAX_PAYMENT must be a whole number of USDC units (6 decimals)', 2);
  const tokenAddress = env.TOKEN_ADDRESS ?? DEV_TOKEN_ADDRESS;
  if (!/^0x[0-9a-fA-F]{40}$/.test(tokenAddress)) fail('TOKEN_ADDRESS must be 0x and 40 hex digits', 2);
  return {
    ...gateway,
    agentId,
    payerKey: payerKey as `0x${string}`,
    body: env.BODY ?? 'hello',
    maxPayment: BigInt(maxPayment),
    tokenAddress: tokenAddress as `0x${string}`,
  };
}

/** The invocation as `GET /v1/proxy/{agent}/invocations/{id}` answers it (the fields used here). */
export type Invocation = {
  invocation_id: string;
  status: 'pending' | 'running' | 'succeeded' | 'failed';
  upstream_status: number | null;
  error_class: string | null;
  payment_amount: string | null;
  payment_payer: string | null;
  payment_transaction: string | null;
  response_body_b64?: string;
};

/** Polls the invocation until it is `succeeded` or `failed` (at most `seconds`). */
export async function finished(
  s: Gateway & { agentId: string },
  invocationId: string,
  seconds = 30,
): Promise<Invocation> {
  const until = Date.now() + seconds * 1000;
  for (;;) {
    const path = `/v1/proxy/${s.agentId}/invocations/${invocationId}`;
    const invocation = await api<Invocation>(s, 'GET', path, 200);
    if (invocation.status === 'succeeded' || invocation.status === 'failed') return invocation;
    if (Date.now() > until) fail(`invocation ${invocationId} is still ${invocation.status} after ${seconds} s`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * Prints what became of the call: its invocation (polled until it completes), what was paid and
 * whether it was collected on chain, and the agent's answer (`streamed`, or the captured body).
 * Exits 1 unless the call succeeded.
 */
export async function report(s: Settings, invocationId: string, streamed?: string): Promise<void> {
  const inv = await finished(s, invocationId);
  const failure = inv.error_class ? `, error class ${inv.error_class}` : '';
  console.log(`invocation ${invocationId} ${inv.status}, upstream status ${inv.upstream_status ?? 'none'}${failure}`);
  if (!inv.payment_amount) console.log('not paid: the agent has no price');
  else
    console.log(
      `paid ${inv.payment_amount} USDC units from ${inv.payment_payer}, ` +
        (inv.payment_transaction
          ? `settled in transaction ${inv.payment_transaction}`
          : 'verified and recorded, not collected (the tenant has no settlement configured: docs/SETTLEMENT.md)'),
    );
  const captured = inv.response_body_b64 && Buffer.from(inv.response_body_b64, 'base64').toString('utf8');
  const answer = streamed ?? captured ?? '(not captured; create the agent with "capture_body": true to read it here)';
  console.log(`answer: ${answer}`);
  if (inv.status !== 'succeeded') process.exit(1);
}
