// `npm run bench:paid [-- --n 150 --warmup 3]`
//
// What a paid call costs beside an unpaid one, per x402 scheme, in one run on one stack: the
// gateway API, its worker and the facilitator (its worker embedded) as `npm start` runs them,
// on Temporal, PostgreSQL and anvil (automine: one block per transaction, no block time to wait
// for). One tenant with settlement configured as npm start's demo tenant is (the dev PKI's
// client certificate registered as a facilitator account, held in the tenant's facilitator
// credential), four agents on one local upstream that answers a small JSON with an
// X-Usage-Cost header (bench/proxy-servers.ts `metered`):
// - unpaid: no pricing;
// - exact: priced `exact`, the EIP-3009 authorization settled on chain before the upstream is called;
// - upto: priced `upto` with a header meter, the Permit2 authorization verified before the call
//   and the metered charge settled on chain after the answer (MeteredChargeWorkflow);
// - batch-settlement: priced from a payment channel without a meter (each call charged its
//   ceiling): one deposit (the first, warm-up, call) through the facilitator, then a voucher per
//   call checked by the gateway and committed to the channel as the answer completes; the
//   client's channel record is kept as the gateway's answers keep it, so the vouchers are signed
//   ahead like the other payments.
// All on the streaming endpoint, POST /v1/proxy/{id}/stream, N sequential calls each: first the
// target's pair alone, the unpaid and the voucher call alternating; then every scheme interleaved
// by round (unpaid, exact, upto, batch-settlement, unpaid, ...) so machine noise hits all alike
// (there a call follows the settling of the one before it, an exact or upto call's workflow,
// facilitator and chain work still running as it starts, so the pair alone decides). Payments are
// signed before the timing starts, one per call, as x402 v2 PAYMENT-SIGNATURE headers built by
// the unmodified clients (@x402/core's x402Client with @x402/evm's ExactEvmScheme or
// UptoEvmScheme) from the gateway's own 402; the challenges' timeout is raised
// (X402_MAX_TIMEOUT_SECONDS) so a pool signed beforehand stays valid. The upto payer approved
// Permit2 once beforehand. Timed: the call until its answer is read whole; for upto also the
// time until the charge is settled, polling the invocation's payment_settlement every
// POLL_MS after the answer (before the next round, so no charge overlaps a timed call).
// Then CPU per call by process, in blocks of N calls per scheme (each upto block counted until
// its charges are settled).
// `npm run bench` (bench/run.ts) runs it and puts its result in docs/BENCHMARKS.md.
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { JsonRpcProvider, MaxUint256, Wallet, hexlify, parseEther, randomBytes } from 'ethers';
import { createPublicClient, http } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { x402Client } from '@x402/core/client';
import { decodePaymentRequiredHeader, encodePaymentSignatureHeader } from '@x402/core/http';
import { toClientEvmSigner } from '@x402/evm';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { UptoEvmScheme } from '@x402/evm/upto/client';
import { BatchSettlementEvmScheme, InMemoryClientChannelStorage } from '@x402/evm/batch-settlement/client';
import type { Infra } from '../scripts/lib/infra.ts';
import { freePort, waitFor } from '../scripts/lib/ports.ts';
import { startStep, timedStep } from '../scripts/lib/progress.ts';
import { parseCommand } from '../scripts/lib/cli.ts';
import { mintToken } from '../scripts/lib/tokens.ts';
import { ensureDevAccount } from '../scripts/dev/facilitator-account.ts';
import { CHAIN_ID, fund, tokenContract } from '../scripts/dev/chain.ts';
import { PERMIT2_ADDRESS } from '../contracts/permit2.ts';
import { SCHEME_UPTO } from '../x402/schemes/upto/schemas.ts';
import { EXACT } from '../x402/schemes/exact/schemas.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../x402/schemes/batch-settlement/schemas.ts';
import { cpuCell, cpuPerUnit, findPids, type CpuGroups } from './cpu.ts';
import { databaseBackends } from './database-cpu.ts';
import { fmtMs, say } from './print.ts';
import { listeningPort, spawnInto, stopChildren } from './processes.ts';
import { finishResult, percentile, runAsMain, startResult, tableLines, type BenchResult } from './result.ts';
import { gatewayEnvironment, removeBenchInfra, startBenchInfra } from './stack.ts';

const USAGE = `usage: npm run bench:paid [-- --n 150 --warmup 3 --schemes unpaid,exact,upto,batch-settlement
                            --profile DIR --json FILE]
  The paid call's cost per x402 scheme beside the unpaid call, on the streaming endpoint
  (docs/BENCHMARKS.md, "Paid calls"); --schemes runs only those (the unpaid call always);
  --profile writes a CPU profile of the gateway API into DIR; --json writes the result to FILE.`;

/** The exact price and the upto maximum, in token units; the upstream's metered charge is below it. */
const PRICE = 10_000n;
const POLL_MS = 20;
const BODY = '{"input":"bench"}';
const NETWORK = `eip155:${CHAIN_ID}` as const;

type Scheme = 'unpaid' | typeof EXACT | typeof SCHEME_UPTO | typeof SCHEME_BATCH_SETTLEMENT;
type Answered = { ms: number; invocationId: string; answeredAt: number };

export async function runPaidBench(argv: string[] = []): Promise<BenchResult> {
  const startedMs = performance.now();
  const { values: args } = parseCommand({
    usage: USAGE,
    args: argv,
    options: {
      n: { type: 'string', default: '150' },
      warmup: { type: 'string', default: '3' },
      schemes: { type: 'string' },
      profile: { type: 'string' },
    },
  });
  const N = Number(args.n);
  const WARMUP = Number(args.warmup);
  const setup = `${N} sequential calls per scheme after ${WARMUP} warm-ups, interleaved by round, streaming endpoint, small JSON; anvil automine; payments signed beforehand`;
  const result = startResult('paid', `npm run bench:paid -- ${argv.join(' ')}`.trim().replace(/ --$/, ''), setup);
  const children: ChildProcess[] = [];
  const cleanups: Array<() => Promise<unknown>> = [];
  let infra: Infra | undefined;
  const dataDir = join(tmpdir(), `gw-bench-paid-${process.pid}`);
  try {
    say(`# paid-call benchmark: ${setup}`);
    infra = await startBenchInfra('paid', dataDir);
    // npm start's demo facilitator account: the dev PKI's client certificate.
    await ensureDevAccount(infra.facilitatorDatabaseUrl, infra.pki.clientCertPem, infra.tokenAddress);

    const upstream = spawnInto(children, ['bench/proxy-servers.ts', 'metered']);
    const upstreamUrl = `http://127.0.0.1:${await listeningPort(upstream)}`;
    const apiPort = await freePort();
    const facilitatorPort = await freePort();
    const facilitatorPublicPort = await freePort();
    const env: NodeJS.ProcessEnv = {
      ...gatewayEnvironment(infra, apiPort),
      FACILITATOR_PORT: String(facilitatorPort),
      FACILITATOR_PUBLIC_PORT: String(facilitatorPublicPort),
      FACILITATOR_METRICS_PORT: '0',
      FACILITATOR_WORKER_METRICS_PORT: '0',
      X402_MAX_TIMEOUT_SECONDS: '1800',
    };
    const api = spawnInto(
      children,
      [...(args.profile ? ['--cpu-prof', `--cpu-prof-dir=${args.profile}`] : []), 'api/main.ts'],
      env,
    );
    const worker = spawnInto(children, ['temporal/gateway-worker-main.ts'], env);
    const facilitator = spawnInto(children, ['facilitator-service/main.ts'], env);
    // Warnings and errors only (LOG_LEVEL=warn); the workers' INFO lines on stderr are left out.
    for (const [name, c] of [
      ['api', api],
      ['worker', worker],
      ['facilitator', facilitator],
    ] as const) {
      c.stdout!.resume();
      createInterface({ input: c.stderr! }).on('line', (line) => {
        if (!/\[INFO\]|^\s|^(asset|orphan|runtime|cacheable|optional|webpack|\.\/)/.test(line))
          process.stderr.write(`[${name}] ${line}\n`);
      });
    }
    const apiUrl = `http://127.0.0.1:${apiPort}`;
    await timedStep('paid: gateway and facilitator', 'waiting for them to answer', async () => {
      await waitFor('gateway API', async () => (await fetch(`${apiUrl}/readyz`)).ok, 90_000);
      await waitFor(
        'facilitator',
        async () => (await fetch(`http://127.0.0.1:${facilitatorPublicPort}/healthz`)).ok,
        60_000,
      );
    });

    const client = new Pool(apiUrl, { connections: 1, keepAliveTimeout: 60_000 });
    cleanups.push(() => client.close());
    const token = await mintToken({ secret: infra.secrets.jwtSecret, tenant: `bench-${randomUUID()}`, user: 'bench' });
    const auth = { authorization: `Bearer ${token}` };
    async function send(method: string, path: string, json?: unknown): Promise<{ status: number; json: any }> {
      const res = await client.request({
        method: method as 'GET',
        path,
        headers: { ...auth, ...(json ? { 'content-type': 'application/json' } : {}) },
        body: json ? JSON.stringify(json) : undefined,
      });
      const text = await res.body.text();
      return { status: res.statusCode, json: text ? JSON.parse(text) : null };
    }

    // Settlement as npm start's demo tenant has it: the dev client certificate and key in a
    // managed credential, the settlement configuration naming the facilitator.
    const credential = await send('POST', '/v1/credentials', {
      name: 'facilitator-client',
      auth_type: 'none',
      source: 'managed',
      plaintext: `${infra.pki.clientCertPem}\n${infra.pki.clientKeyPem}`,
    });
    if (credential.status !== 201)
      throw new Error(`credential: ${credential.status} ${JSON.stringify(credential.json)}`);
    const config = await send('PUT', '/v1/settlement/config', {
      facilitator_url: `https://127.0.0.1:${facilitatorPort}`,
      facilitator_credential_ref: credential.json.id,
    });
    if (config.status !== 201) throw new Error(`settlement config: ${config.status} ${JSON.stringify(config.json)}`);

    const payTo = new Wallet(hexlify(randomBytes(32))).address;
    const channelDeposit = PRICE * BigInt(3 * (N + WARMUP) + 10);
    const pricing = { amount: String(PRICE), asset: 'USDC', network: 'base', pay_to: payTo };
    const agentFor: Record<Scheme, Record<string, unknown> | undefined> = {
      unpaid: undefined,
      [EXACT]: pricing,
      [SCHEME_UPTO]: { ...pricing, scheme: SCHEME_UPTO, meter: { kind: 'header', header: 'X-Usage-Cost' } },
      // No meter: each call is charged its ceiling; one deposit covers every call of the run.
      [SCHEME_BATCH_SETTLEMENT]: { ...pricing, scheme: SCHEME_BATCH_SETTLEMENT, min_deposit: String(channelDeposit) },
    };
    const asked = args.schemes?.split(',').map((s) => s.trim());
    const schemes = (Object.keys(agentFor) as Scheme[]).filter((s) => s === 'unpaid' || !asked || asked.includes(s));
    const agents = {} as Record<Scheme, string>;
    for (const scheme of schemes) {
      const created = await send('POST', '/v1/agents', {
        name: `bench-${scheme}-${randomUUID()}`,
        upstream_url: `${upstreamUrl}/agent`,
        rate_limit_rps: 100_000,
        rate_limit_burst: 100_000,
        ...(agentFor[scheme] ? { pricing: agentFor[scheme] } : {}),
      });
      if (created.status !== 201) throw new Error(`agent ${scheme}: ${created.status} ${JSON.stringify(created.json)}`);
      agents[scheme] = created.json.id;
    }

    // The payers: fresh wallets with test USDC; the upto one (with ETH for its one approval) approves Permit2.
    const provider = new JsonRpcProvider(infra.chainRpcUrl, CHAIN_ID, { staticNetwork: true, cacheTimeout: -1 });
    cleanups.push(async () => provider.destroy());
    const calls = 2 * (N + WARMUP);
    const exactPayer = new Wallet(hexlify(randomBytes(32)));
    const uptoPayer = new Wallet(hexlify(randomBytes(32)), provider);
    await fund(infra.chainRpcUrl, infra.tokenAddress, exactPayer.address, { usdc: PRICE * BigInt(calls + 10) });
    await fund(infra.chainRpcUrl, infra.tokenAddress, uptoPayer.address, {
      eth: parseEther('1'),
      usdc: PRICE * BigInt(calls + 10),
    });
    await (await tokenContract(infra.tokenAddress, uptoPayer).approve(PERMIT2_ADDRESS, MaxUint256)).wait();
    const channelPayer = new Wallet(hexlify(randomBytes(32)));
    await fund(infra.chainRpcUrl, infra.tokenAddress, channelPayer.address, { usdc: channelDeposit });

    // The channel client's record, kept as the gateway's answers would keep it (each call charged
    // its ceiling), so its vouchers can be signed ahead: the first payment is the deposit.
    const channelStorage = new InMemoryClientChannelStorage();
    let channelCharged = 0n;
    let channelBalance = 0n;
    // The unmodified x402 v2 clients, each allowed the local token only.
    const allowed = { allowedAssets: [{ network: NETWORK, asset: infra.tokenAddress }] };
    const payers: Partial<Record<Scheme, x402Client>> = {
      [EXACT]: new x402Client()
        .register('eip155:*', new ExactEvmScheme(privateKeyToAccount(exactPayer.privateKey as `0x${string}`)))
        .setSpendControls(allowed),
      [SCHEME_UPTO]: new x402Client()
        .register(
          'eip155:*',
          new UptoEvmScheme(
            toClientEvmSigner(
              privateKeyToAccount(uptoPayer.privateKey as `0x${string}`),
              createPublicClient({ transport: http(infra.chainRpcUrl) }) as Parameters<typeof toClientEvmSigner>[1],
            ),
          ),
        )
        .setSpendControls(allowed),
      [SCHEME_BATCH_SETTLEMENT]: new x402Client()
        .register(
          'eip155:*',
          new BatchSettlementEvmScheme(
            toClientEvmSigner(privateKeyToAccount(channelPayer.privateKey as `0x${string}`)),
            { storage: channelStorage },
          ),
        )
        .setSpendControls(allowed),
    };
    const streamPath = (scheme: Scheme) => `/v1/proxy/${agents[scheme]}/stream`;

    /** `count` PAYMENT-SIGNATURE headers for the agent of `scheme`, each paying the gateway's own 402. */
    async function signPool(scheme: Scheme, count: number): Promise<string[]> {
      const payer = payers[scheme];
      if (!payer) return Array.from({ length: count }, () => '');
      const unpaid = await client.request({
        method: 'POST',
        path: streamPath(scheme),
        headers: { ...auth, 'content-type': 'application/json' },
        body: BODY,
      });
      await unpaid.body.dump();
      const header = unpaid.headers['payment-required'];
      if (unpaid.statusCode !== 402 || typeof header !== 'string')
        throw new Error(`${scheme}: the unpaid call answered ${unpaid.statusCode} without PAYMENT-REQUIRED`);
      const required = decodePaymentRequiredHeader(header);
      const pool: string[] = [];
      for (let i = 0; i < count; i++) {
        const payment = await payer.createPaymentPayload(required);
        pool.push(encodePaymentSignatureHeader(payment));
        if (scheme !== SCHEME_BATCH_SETTLEMENT) continue;
        const payload = payment.payload as {
          type: string;
          voucher: { channelId: string };
          deposit?: { amount: string };
        };
        if (payload.deposit) channelBalance += BigInt(payload.deposit.amount);
        channelCharged += PRICE;
        await channelStorage.set(payload.voucher.channelId.toLowerCase(), {
          balance: String(channelBalance),
          chargedCumulativeAmount: String(channelCharged),
        });
      }
      return pool;
    }

    /** One call on the streaming endpoint, its answer read whole. */
    async function call(scheme: Scheme, payment: string): Promise<Answered> {
      const t0 = performance.now();
      const res = await client.request({
        method: 'POST',
        path: streamPath(scheme),
        headers: { ...auth, 'content-type': 'application/json', ...(payment ? { 'payment-signature': payment } : {}) },
        body: BODY,
      });
      const text = await res.body.text();
      const answeredAt = performance.now();
      const invocationId = res.headers['x-gateway-invocation-id'];
      if (res.statusCode !== 200 || typeof invocationId !== 'string')
        throw new Error(`${scheme} call answered ${res.statusCode}: ${text.slice(0, 200)}`);
      // An exact payment is settled before the call: its answer carries the receipt.
      if (scheme === EXACT && typeof res.headers['payment-response'] !== 'string')
        throw new Error(`exact call answered without PAYMENT-RESPONSE`);
      return { ms: answeredAt - t0, invocationId, answeredAt };
    }

    /** Waits until the invocation's charge is settled on chain; when that was seen (performance.now()). */
    async function chargeSettled(invocationId: string): Promise<number> {
      const deadline = Date.now() + 60_000;
      for (;;) {
        const polled = await send('GET', `/v1/proxy/${agents[SCHEME_UPTO]}/invocations/${invocationId}`);
        const state = polled.json?.payment_settlement;
        if (state === 'settled') {
          if (!/^0x[0-9a-f]{64}$/.test(String(polled.json.payment_transaction)))
            throw new Error(`upto charge of ${invocationId} settled without a transaction`);
          return performance.now();
        }
        if (polled.status !== 200 || (state && state !== 'settling'))
          throw new Error(`upto charge of ${invocationId}: ${polled.status} ${JSON.stringify(polled.json)}`);
        if (Date.now() > deadline) throw new Error(`upto charge of ${invocationId} not settled after 60 s`);
        await sleep(POLL_MS);
      }
    }

    // The target's pair first: the unpaid call and the voucher call alone, alternating, so that
    // neither follows the other schemes' settling (a Temporal workflow, the facilitator, the chain
    // still finishing as the next call starts); then every scheme, interleaved by round.
    const pair = schemes.includes(SCHEME_BATCH_SETTLEMENT) ? (['unpaid', SCHEME_BATCH_SETTLEMENT] as Scheme[]) : null;
    const pools = await timedStep('paid: signing payments', `${N + WARMUP} per paid scheme and round`, async () => {
      const entries = await Promise.all(
        schemes.map(async (s) => [s, await signPool(s, (pair?.includes(s) ? 2 : 1) * (N + WARMUP))] as const),
      );
      return Object.fromEntries(entries) as Record<Scheme, string[]>;
    });

    const settleAfterAnswer: number[] = [];
    const settleAfterStart: number[] = [];
    /** N timed rounds of these schemes, after WARMUP; each call's payment the next of its pool. */
    async function measure(label: string, order: Scheme[]): Promise<Record<Scheme, number[]>> {
      const times = Object.fromEntries(order.map((s) => [s, [] as number[]])) as Record<Scheme, number[]>;
      const measuring = startStep(`paid: measuring ${label}`, `${WARMUP} warm-up and ${N} timed rounds, interleaved`);
      for (let round = 0; round < WARMUP + N; round++) {
        for (const scheme of order) {
          const answered = await call(scheme, pools[scheme].shift()!);
          const timed = round >= WARMUP;
          if (timed) times[scheme].push(answered.ms);
          if (scheme === SCHEME_UPTO) {
            const settledAt = await chargeSettled(answered.invocationId);
            if (timed) {
              settleAfterAnswer.push(settledAt - answered.answeredAt);
              settleAfterStart.push(settledAt - answered.answeredAt + answered.ms);
            }
          }
        }
        measuring.progress(round + 1, WARMUP + N, 'rounds');
      }
      measuring.end();
      return times;
    }
    const pairTimes = pair ? await measure('the unpaid and the voucher call alone', pair) : null;
    const times = await measure('every scheme', schemes);

    /** The p50 and p95 of each scheme's calls, beside the unpaid call's p50 of the same rounds. */
    const latencyTable = (title: string, order: Scheme[], of: Record<Scheme, number[]>) => {
      const unpaid = percentile(of.unpaid, 0.5);
      return {
        title,
        header: ['scheme', 'p50', 'p95', 'p50 / unpaid p50'],
        rows: order.map((s) => {
          const p50 = percentile(of[s], 0.5);
          return [s, fmtMs(p50), fmtMs(percentile(of[s], 0.95)), `${(p50 / unpaid).toFixed(2)}×`];
        }),
      };
    };
    /** A voucher call's p50 over the unpaid call's, in the same rounds. */
    const voucherCheck = (figure: string, of: Record<Scheme, number[]>, target: string, judged: boolean) => {
      const unpaid = percentile(of.unpaid, 0.5);
      const p50 = percentile(of[SCHEME_BATCH_SETTLEMENT], 0.5);
      return {
        figure,
        measured: `+${fmtMs(p50 - unpaid)}`,
        baseline: `unpaid ${fmtMs(unpaid)}`,
        ratio: `${(p50 / unpaid).toFixed(2)}×`,
        target,
        pass: judged ? p50 - unpaid <= 1 : null,
      };
    };
    const unpaidP50 = percentile(times.unpaid, 0.5);
    const latency = latencyTable(
      `time to the full answer, POST /v1/proxy/{id}/stream, ${N} sequential calls per scheme`,
      schemes,
      times,
    );
    const settlement = () => ({
      title: `upto: until the charge is settled on chain (anvil automine: a block per transaction; polled every ${POLL_MS} ms)`,
      header: ['from', 'p50', 'p95'],
      rows: [
        [
          'the end of the answer',
          fmtMs(percentile(settleAfterAnswer, 0.5)),
          fmtMs(percentile(settleAfterAnswer, 0.95)),
        ],
        ['the start of the call', fmtMs(percentile(settleAfterStart, 0.5)), fmtMs(percentile(settleAfterStart, 0.95))],
      ],
    });
    for (const table of schemes.includes(SCHEME_UPTO) ? [latency, settlement()] : [latency]) {
      say();
      for (const line of tableLines(table, '## ')) say(line);
      result.tables.push(table);
    }
    if (pairTimes) {
      const pairTable = latencyTable(
        `the target's pair: the unpaid and the voucher call alone, alternating, ${N} calls each`,
        pair!,
        pairTimes,
      );
      say();
      for (const line of tableLines(pairTable, '## ')) say(line);
      result.tables.push(pairTable);
      result.checks.push(
        voucherCheck(
          'batch-settlement voucher-paid call p50 (streaming) over the unpaid p50, the two alone',
          pairTimes,
          '≤ +1 ms',
          true,
        ),
        voucherCheck(
          'batch-settlement voucher-paid call p50 (streaming), every scheme interleaved',
          times,
          '(as above)',
          false,
        ),
      );
    }
    for (const scheme of ([EXACT, SCHEME_UPTO] as const).filter((s) => schemes.includes(s))) {
      const p50 = percentile(times[scheme], 0.5);
      result.checks.push({
        figure: `${scheme} paid call p50 (streaming)`,
        measured: fmtMs(p50),
        baseline: `unpaid ${fmtMs(unpaidP50)}`,
        ratio: `${(p50 / unpaidP50).toFixed(2)}×`,
        target: '(none)',
        pass: null,
      });
    }

    // CPU per call by process, a block of N calls per scheme; each upto block counted until its charges are settled.
    const gatewayDb = await databaseBackends(infra.databaseUrl);
    cleanups.push(() => gatewayDb.end());
    const facilitatorDb = await databaseBackends(infra.facilitatorDatabaseUrl);
    cleanups.push(() => facilitatorDb.end());
    const anvilPort = new URL(infra.chainRpcUrl).port;
    const groups: CpuGroups = {
      'gateway API': () => [api.pid!],
      'gateway worker': () => [worker.pid!],
      'facilitator (its worker embedded)': () => [facilitator.pid!],
      // The trailing space: /proc's arguments end in one, and `--port 1234` must not match `--port 12345`.
      anvil: () => findPids('--chain-id', `--port ${anvilPort} `),
      'PostgreSQL (both databases’ backends)': async () => [
        ...(await gatewayDb.pids()),
        ...(await facilitatorDb.pids()),
      ],
    };
    const cpuPools = await timedStep('paid: signing payments for the CPU blocks', `${N} per paid scheme`, async () => {
      const entries = await Promise.all(schemes.map(async (s) => [s, await signPool(s, N)] as const));
      return Object.fromEntries(entries) as Record<Scheme, string[]>;
    });
    const cpu = new Map<Scheme, Map<string, number | null>>();
    await timedStep('paid: CPU per call', `${N} calls per scheme, in blocks`, async () => {
      for (const scheme of schemes)
        cpu.set(
          scheme,
          await cpuPerUnit(groups, N, async () => {
            const ids: string[] = [];
            for (const payment of cpuPools[scheme]) ids.push((await call(scheme, payment)).invocationId);
            if (scheme === SCHEME_UPTO) for (const id of ids) await chargeSettled(id);
          }),
        );
    });
    const cpuTable = {
      title: `CPU per call by process (ms, user + system; blocks of ${N} sequential calls, upto's until its charges are settled, the polls included)`,
      header: ['process', ...schemes],
      rows: Object.keys(groups).map((name) => [name, ...schemes.map((s) => cpuCell(cpu.get(s)!.get(name), 2))]),
    };
    say();
    for (const line of tableLines(cpuTable, '## ')) say(line);
    result.tables.push(cpuTable);
    result.notes.push(
      `anvil automines (a block per transaction, no block time); the exact payment is settled on chain before the upstream is called, the upto charge after the answer`,
    );
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
    await stopChildren(children);
    await removeBenchInfra(infra, dataDir);
  }
  return finishResult(result, startedMs);
}

if (import.meta.main) await runAsMain(runPaidBench);
