// Chaos scenario 4 (docs/CHAOS.md): 200 concurrent /settle requests over 20 EIP-3009 authorizations
// (ten copies each), over mutual TLS, while the facilitator WORKER (a child process; the HTTPS
// process runs without an embedded worker) is SIGKILLed once mid-broadcast and restarted.
// Mining is held until the kill, so the worker dies with transactions signed, stored and handed
// to the node but not mined (it is killed once 5 are); some of those are then dropped from the node's pool, so only a
// re-send of the stored bytes after the restart can land them. Blocks then come every second.
// Invariants (any violation throws):
// - exactly 20 transactions on chain: one AuthorizationUsed per authorization, 20 Transfers to
//   the payee, the gas wallet's nonce advanced by exactly 20;
// - every answer to every copy is 200 {success: true, transaction: <that authorization's
//   hash>} or 503 with Retry-After, and a client retrying the 503s ends with the hash;
// - daily-ceiling usage counted once per authorization: the account's ceiling is exactly the
//   20 amounts (a double reservation would refuse one with 429) and `daily_usage` holds that sum.
import { setTimeout as sleep } from 'node:timers/promises';
import {
  authorizationKey,
  authorizationsUsed,
  recordsByStatus,
  reservedUsage,
  runIfMain,
  signAuthorizations,
  startFacilitatorSystem,
  transfersTo,
  type Reply,
} from './facilitator-system.ts';
import type { ChaosScenario } from './harness.ts';

const AUTHORIZATIONS = 20;
const COPIES = 10;
const VALUE = 250_000n; // 0.25 USDC
const RETRY_DEADLINE_MS = 180_000;
// The worker dies once this many settlements are broadcast (the rest are still being verified,
// claimed or signed), so the node holds several transactions to lose.
const KILL_AT_BROADCAST = 5;

function shuffle<T>(items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
}

async function run(): Promise<string> {
  const system = await startFacilitatorSystem({
    name: 'settle-kill',
    dailyCeiling: VALUE * BigInt(AUTHORIZATIONS),
    // Short enough that the copies waiting through the crash get 503 + Retry-After and retry.
    overrides: { FACILITATOR_SETTLE_DEADLINE_MS: '10000', FACILITATOR_INCLUSION_TIMEOUT_MS: '8000' },
  });
  let failed = false;
  try {
    const authorizations = await signAuthorizations(system, AUTHORIZATIONS, VALUE);
    const payTo = authorizations[0].payTo;
    const fromBlock = await system.chain.getBlockNumber();
    const gasNonceBefore = await system.chain.getTransactionCount(system.gasWallet, 'latest');

    // Hold mining: what the worker broadcasts stays in the node's pool until after the kill.
    await system.chain.send('evm_setAutomine', [false]);
    const worker = system.startWorker();
    await worker.ready;

    const bad: string[] = [];
    const hashesSeen = new Map<string, Set<string>>();
    let firstAnswer503 = 0;
    let answers = 0;
    let retries = 0;
    const check = (auth: (typeof authorizations)[number], reply: Reply): void => {
      answers++;
      if (reply.status === 503) {
        if (!reply.retryAfter || !(Number(reply.retryAfter) > 0))
          bad.push(`503 without Retry-After: ${JSON.stringify(reply.json)}`);
        return;
      }
      if (reply.status !== 200 || reply.json?.success !== true || typeof reply.json.transaction !== 'string') {
        bad.push(`${reply.status} ${JSON.stringify(reply.json)}`);
        return;
      }
      const key = authorizationKey(auth);
      hashesSeen.set(key, (hashesSeen.get(key) ?? new Set()).add(reply.json.transaction.toLowerCase()));
    };
    const copies = shuffle(authorizations.flatMap((auth) => Array.from({ length: COPIES }, () => auth)));
    const until = Date.now() + RETRY_DEADLINE_MS;
    const clients = copies.map(async (auth) => {
      let reply = await system.post('/settle', auth.body);
      if (reply.status === 503) firstAnswer503++;
      check(auth, reply);
      while (reply.status === 503 && Date.now() < until) {
        await sleep(Math.min(Number(reply.retryAfter) * 1000 || 1000, 2_000));
        reply = await system.post('/settle', auth.body);
        retries++;
        check(auth, reply);
      }
      return reply;
    });

    // Kill the worker once a few transactions have been handed to the node.
    const killDeadline = Date.now() + 60_000;
    let atKill: Record<string, number> = {};
    for (;;) {
      atKill = await recordsByStatus(system);
      if ((atKill.broadcast ?? 0) >= KILL_AT_BROADCAST) break;
      if (Date.now() > killDeadline)
        throw new Error(`no settlement reached broadcast within 60 s (records: ${JSON.stringify(atKill)})`);
      await sleep(10);
    }
    await system.killWorker();
    atKill = await recordsByStatus(system);
    const exitSignal = worker.child.signalCode;
    if (exitSignal !== 'SIGKILL') throw new Error(`the worker was not SIGKILLed (${exitSignal})`);

    // The node loses every other transaction of the gas wallet it holds (read from its pool: a
    // record may say broadcast for bytes the node never got, and a fee bump replaces the first
    // attempt in the pool): only a re-send of stored bytes can land those.
    const pool = (await system.chain.send('txpool_content', [])) as Record<
      string,
      Record<string, Record<string, { hash: string }>>
    >;
    const held = ['pending', 'queued']
      .flatMap((part) =>
        Object.entries(pool[part] ?? {}).filter(([from]) => from.toLowerCase() === system.gasWallet.toLowerCase()),
      )
      .flatMap(([, byNonce]) => Object.entries(byNonce).map(([nonce, tx]) => ({ nonce: Number(nonce), hash: tx.hash })))
      .sort((a, b) => a.nonce - b.nonce);
    const inPool = held.length;
    let dropped = 0;
    for (const [i, tx] of held.entries()) {
      if (i % 2 === 1) continue; // the first, third, ... are dropped
      await system.chain.send('anvil_dropTransaction', [tx.hash]);
      dropped++;
    }
    // Blocks every second from now on, as on a live chain (Base: 2 s).
    await system.chain.send('evm_setIntervalMining', [1]);

    const restarted = system.startWorker();
    await restarted.ready;
    const finals = await Promise.all(clients);

    // Let the last blocks come, then read the chain.
    const hashes = new Map<string, string>();
    for (const [i, reply] of finals.entries()) {
      if (reply.status !== 200)
        bad.push(`copy ${i} still ${reply.status} after ${RETRY_DEADLINE_MS / 1000} s of retries`);
    }
    if (bad.length > 0) throw new Error(`${bad.length} wrong answer(s), first: ${bad.slice(0, 3).join('; ')}`);
    for (const auth of authorizations) {
      const seen = hashesSeen.get(authorizationKey(auth));
      if (!seen || seen.size !== 1)
        throw new Error(`authorization ${authorizationKey(auth)} answered with ${seen?.size ?? 0} distinct hashes`);
      hashes.set(authorizationKey(auth), [...seen][0]);
    }

    const used = await authorizationsUsed(system, fromBlock + 1);
    if (used.size !== AUTHORIZATIONS)
      throw new Error(`${used.size} authorizations consumed on chain, expected ${AUTHORIZATIONS}`);
    for (const [key, txs] of used) {
      if (txs.length !== 1) throw new Error(`authorization ${key} consumed by ${txs.length} transactions`);
      if (hashes.get(key) !== txs[0].toLowerCase())
        throw new Error(`authorization ${key}: answered ${hashes.get(key)}, on chain ${txs[0]}`);
    }
    const transfers = await transfersTo(system, payTo, fromBlock + 1);
    if (transfers !== AUTHORIZATIONS)
      throw new Error(`${transfers} transfers to the payee, expected ${AUTHORIZATIONS}`);
    const balance = (await system.token.balanceOf(payTo)) as bigint;
    if (balance !== VALUE * BigInt(AUTHORIZATIONS))
      throw new Error(`payee holds ${balance}, expected ${VALUE * BigInt(AUTHORIZATIONS)}`);
    // Nothing else may still be queued behind them: wait two blocks, then count the gas wallet's transactions.
    await sleep(2_500);
    const gasNonceDelta = (await system.chain.getTransactionCount(system.gasWallet, 'pending')) - gasNonceBefore;
    if (gasNonceDelta !== AUTHORIZATIONS)
      throw new Error(`the gas wallet sent ${gasNonceDelta} transactions, expected ${AUTHORIZATIONS}`);

    const reserved = await reservedUsage(system);
    if (reserved !== VALUE * BigInt(AUTHORIZATIONS))
      throw new Error(
        `daily usage reserved ${reserved}, expected ${VALUE * BigInt(AUTHORIZATIONS)} (once per authorization)`,
      );
    const records = await recordsByStatus(system);
    if (records.settled !== AUTHORIZATIONS || Object.keys(records).length !== 1)
      throw new Error(`settlement records ${JSON.stringify(records)}, expected ${AUTHORIZATIONS} settled`);
    const { rows: attemptRows } = await system.pool.query<{ sends: string }>(
      'select sum(attempts)::text as sends from settlements where account_id = $1',
      [system.account.id],
    );

    const killState = ['claimed', 'signed', 'broadcast'].map((s) => `${atKill[s] ?? 0} ${s}`).join(', ');
    return (
      `${AUTHORIZATIONS}×${COPIES} settles: ${answers} answers (${firstAnswer503} first answers 503+Retry-After, ${retries} retries), all ended with their authorization's hash; ` +
      `worker SIGKILLed at ${killState} (${inPool} in the node's pool, ${dropped} of them dropped); on chain: ${used.size} authorizations used once each, ${transfers} transfers, gas nonce +${gasNonceDelta} ` +
      `(${attemptRows[0].sends} sends of stored bytes); daily usage ${reserved} = ${AUTHORIZATIONS}×${VALUE}, ceiling exact`
    );
  } catch (err) {
    failed = true;
    throw new Error(
      `${(err as Error).message} (data and logs kept in ${system.dataDir}, database ${system.config.databaseUrl})`,
      { cause: err },
    );
  } finally {
    await system.chain.send('evm_setIntervalMining', [0]).catch(() => undefined);
    await system.close(failed);
  }
}

export const scenario: ChaosScenario = {
  name: 'settle-kill',
  description:
    '200 concurrent /settle over 20 authorizations while the facilitator worker is SIGKILLed mid-broadcast: exactly 20 transactions, every copy gets its hash',
  run,
};

runIfMain(import.meta, scenario);
