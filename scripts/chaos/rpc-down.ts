// Chaos scenario 5 (docs/CHAOS.md): the RPC endpoint goes down. A loopback TCP proxy we control sits
// between the facilitator (HTTPS process and worker) and anvil. With blocks held, a batch of
// settlements is signed and handed to the node; then the proxy is cut (open connections
// destroyed, new ones reset) and the node loses those transactions. Invariants:
// - during the outage `/healthz?ready=1` answers 503 naming the rpc check, and `/settle` of a
//   new authorization (and a retry of a pending one) answers 503 with Retry-After;
// - the pending settlements are not given up: when the proxy returns, their workflows (still
//   retrying) re-send the stored bytes and each lands exactly once, with the hash every caller
//   ends with; the authorization refused during the outage settles on a retry;
// - exactly one transaction per authorization, and the gas wallet's nonce advanced by exactly
//   the number of authorizations.
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  authorizationKey,
  authorizationsUsed,
  recordsByStatus,
  runIfMain,
  signAuthorizations,
  startFacilitatorSystem,
  type Authorization,
  type FacilitatorSystem,
  type Reply,
} from './facilitator-system.ts';
import type { ChaosScenario } from './harness.ts';

const PENDING = 5;
const VALUE = 100_000n;
// Longer than the settle deadline and the inclusion window, so callers in flight are answered
// (503) while the chain is unreachable and every retry budget of a short outage is exceeded.
const OUTAGE_MS = 12_000;

type RpcProxy = {
  url: string;
  up: boolean;
  cut(): void;
  restore(): void;
  connections: number;
  refused: number;
  close(): Promise<void>;
};

/** A TCP proxy to `target` (host:port) that can be cut: open connections destroyed, new ones reset at once. */
async function startRpcProxy(targetUrl: string): Promise<RpcProxy> {
  const target = new URL(targetUrl);
  const open = new Set<Socket>();
  const proxy: RpcProxy = {
    url: '',
    up: true,
    connections: 0,
    refused: 0,
    cut() {
      proxy.up = false;
      for (const socket of open) socket.destroy();
      open.clear();
    },
    restore() {
      proxy.up = true;
    },
    close: () =>
      new Promise((r) => {
        proxy.cut();
        server.close(() => r());
      }),
  };
  const server: Server = createServer((client) => {
    if (!proxy.up) {
      proxy.refused++;
      client.resetAndDestroy();
      return;
    }
    proxy.connections++;
    const upstream = connect(Number(target.port), target.hostname);
    open.add(client).add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  proxy.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return proxy;
}

/** Settles with retries of 503 answers until a final answer; every answer must be the hash or 503 + Retry-After. */
function settleUntilFinal(system: FacilitatorSystem, auth: Authorization, bad: string[], deadlineMs: number) {
  return (async () => {
    const until = Date.now() + deadlineMs;
    const answers: Reply[] = [];
    for (;;) {
      const reply = await system.post('/settle', auth.body);
      answers.push(reply);
      if (reply.status === 503) {
        if (!(Number(reply.retryAfter) > 0)) bad.push(`503 without Retry-After for ${authorizationKey(auth)}`);
        if (Date.now() > until) return answers;
        await sleep(Math.min(Number(reply.retryAfter) * 1000 || 1000, 2_000));
        continue;
      }
      if (reply.status !== 200 || reply.json?.success !== true)
        bad.push(`${authorizationKey(auth)}: ${reply.status} ${JSON.stringify(reply.json)}`);
      return answers;
    }
  })();
}

async function run(): Promise<string> {
  let proxy: RpcProxy | undefined;
  const system = await startFacilitatorSystem({
    name: 'rpc-down',
    routeRpc: async (anvilUrl) => (proxy = await startRpcProxy(anvilUrl)).url,
    overrides: { FACILITATOR_SETTLE_DEADLINE_MS: '8000', FACILITATOR_INCLUSION_TIMEOUT_MS: '6000' },
  });
  const rpc = proxy!;
  let failed = false;
  try {
    const worker = system.startWorker();
    await worker.ready;
    const [baseline, refusedInOutage, ...pending] = await signAuthorizations(system, PENDING + 2, VALUE, 1);
    const fromBlock = await system.chain.getBlockNumber();
    const gasNonceBefore = await system.chain.getTransactionCount(system.gasWallet, 'latest');
    const bad: string[] = [];

    const readyBefore = await system.get('/healthz?ready=1');
    if (readyBefore.status !== 200)
      throw new Error(`not ready before the outage: ${readyBefore.status} ${JSON.stringify(readyBefore.json)}`);
    const first = await system.post('/settle', baseline.body);
    if (first.status !== 200 || first.json?.success !== true)
      throw new Error(`baseline settle failed: ${first.status} ${JSON.stringify(first.json)}`);

    // Blocks held: the batch is signed, stored and handed to the node, and stays in its pool.
    await system.chain.send('evm_setAutomine', [false]);
    const inFlight = pending.map((auth) => settleUntilFinal(system, auth, bad, 120_000));
    const broadcastBy = Date.now() + 60_000;
    while (((await recordsByStatus(system)).broadcast ?? 0) < PENDING) {
      if (Date.now() > broadcastBy)
        throw new Error(`the batch did not reach broadcast: ${JSON.stringify(await recordsByStatus(system))}`);
      await sleep(20);
    }

    // The outage: the facilitator loses its RPC, and the node loses the batch it held.
    rpc.cut();
    const cutAt = Date.now();
    const { rows: held } = await system.pool.query<{
      tx_hash: string;
      payer: string;
      nonce: string;
      gas_nonce: string;
    }>("select tx_hash, payer, nonce, gas_nonce::text from settlements where status = 'broadcast'");
    for (const { tx_hash } of held) await system.chain.send('anvil_dropTransaction', [tx_hash]);
    await system.chain.send('evm_setAutomine', [true]);

    // The open probe answers from a check at most 1 s old (facilitator-service/readiness.ts).
    let readyDown = await system.get('/healthz?ready=1');
    for (const until = Date.now() + 3_000; readyDown.status === 200 && Date.now() < until;) {
      await sleep(250);
      readyDown = await system.get('/healthz?ready=1');
    }
    if (readyDown.status !== 503 || readyDown.json?.checks?.rpc !== false)
      throw new Error(`readiness during the outage: ${readyDown.status} ${JSON.stringify(readyDown.json)}`);
    const settleDown = await system.post('/settle', refusedInOutage.body);
    if (settleDown.status !== 503 || !(Number(settleDown.retryAfter) > 0))
      throw new Error(`/settle during the outage: ${settleDown.status} ${JSON.stringify(settleDown.json)}`);
    const retryDown = await system.post('/settle', pending[0].body);
    if (retryDown.status !== 503)
      throw new Error(
        `a retry of a pending settlement during the outage: ${retryDown.status} ${JSON.stringify(retryDown.json)}`,
      );
    await sleep(Math.max(OUTAGE_MS - (Date.now() - cutAt), 0));
    // Still pending, nothing given up, nothing on chain for them.
    const during = await recordsByStatus(system);
    if ((during.broadcast ?? 0) !== PENDING || (during.failed ?? 0) > 0)
      throw new Error(`records during the outage: ${JSON.stringify(during)}`);
    if ((await authorizationsUsed(system, fromBlock + 1)).size !== 1)
      throw new Error('a dropped transaction landed during the outage');
    const refusedConnections = rpc.refused;

    rpc.restore();
    const backBy = Date.now() + 30_000;
    let readyAgain = await system.get('/healthz?ready=1');
    while (readyAgain.status !== 200 && Date.now() < backBy) {
      await sleep(200);
      readyAgain = await system.get('/healthz?ready=1');
    }
    if (readyAgain.status !== 200)
      throw new Error(`not ready 30 s after the RPC returned: ${JSON.stringify(readyAgain.json)}`);
    const answered = await Promise.all([...inFlight, settleUntilFinal(system, refusedInOutage, bad, 60_000)]);
    if (bad.length > 0) throw new Error(`${bad.length} wrong answer(s), first: ${bad.slice(0, 3).join('; ')}`);
    const finals = answered.map((answers) => answers.at(-1)!);
    if (finals.some((reply) => reply.status !== 200))
      throw new Error('a settlement still answered 503 after the RPC returned');
    const outage503 = answered
      .slice(0, PENDING)
      .reduce((n, answers) => n + answers.filter((r) => r.status === 503).length, 0);

    const all = [baseline, refusedInOutage, ...pending];
    const used = await authorizationsUsed(system, fromBlock + 1);
    if (used.size !== all.length)
      throw new Error(`${used.size} authorizations consumed on chain, expected ${all.length}`);
    for (const [i, auth] of [...pending, refusedInOutage].entries()) {
      const txs = used.get(authorizationKey(auth)) ?? [];
      if (txs.length !== 1)
        throw new Error(`authorization ${authorizationKey(auth)} consumed by ${txs.length} transactions`);
      if (finals[i].json.transaction.toLowerCase() !== txs[0].toLowerCase())
        throw new Error(
          `authorization ${authorizationKey(auth)}: answered ${finals[i].json.transaction}, on chain ${txs[0]}`,
        );
    }
    // Each pending settlement landed with the gas nonce it took before the outage (the stored
    // bytes, or a fee bump of them: the same nonce, so never a second transfer).
    const gasNonceBeforeCut = new Map(
      held.map((r) => [`${r.payer.toLowerCase()}:${r.nonce.toLowerCase()}`, Number(r.gas_nonce)]),
    );
    let sameBytes = 0;
    for (const auth of pending) {
      const onChain = used.get(authorizationKey(auth))![0];
      const tx = await system.chain.getTransaction(onChain);
      if (tx?.nonce !== gasNonceBeforeCut.get(authorizationKey(auth)))
        throw new Error(
          `authorization ${authorizationKey(auth)} landed with gas nonce ${tx?.nonce}, not the one it took before the outage`,
        );
      if (held.some((r) => r.tx_hash.toLowerCase() === onChain.toLowerCase())) sameBytes++;
    }
    const gasNonceDelta = (await system.chain.getTransactionCount(system.gasWallet, 'pending')) - gasNonceBefore;
    if (gasNonceDelta !== all.length)
      throw new Error(`the gas wallet sent ${gasNonceDelta} transactions, expected ${all.length}`);
    const records = await recordsByStatus(system);
    if (records.settled !== all.length) throw new Error(`settlement records ${JSON.stringify(records)}`);

    return (
      `RPC cut ${(OUTAGE_MS / 1000).toFixed(0)} s with ${PENDING} settlements broadcast and dropped by the node: readiness 503 (rpc false), /settle 503+Retry-After, ` +
      `${refusedConnections} RPC connections reset, ${outage503} 503s to the waiting callers; after it returned: ${PENDING}/${PENDING} pending settled with the gas nonce taken before the outage (${sameBytes} with the very bytes stored then), ` +
      `the refused one settled on retry; on chain ${used.size} authorizations used once each, gas nonce +${gasNonceDelta}`
    );
  } catch (err) {
    failed = true;
    throw new Error(
      `${(err as Error).message} (data and logs kept in ${system.dataDir}, database ${system.config.databaseUrl})`,
      { cause: err },
    );
  } finally {
    await system.close(failed);
    await rpc.close();
  }
}

export const scenario: ChaosScenario = {
  name: 'rpc-down',
  description:
    'the RPC endpoint cut: readiness and /settle answer 503; settlements pending at the cut finish once it returns, one transaction each',
  run,
};

runIfMain(import.meta, scenario);
