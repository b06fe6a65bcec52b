// SettlementWorkflow's and SettlementWatchWorkflow's own logic on Temporal's time-skipping test
// server (test/workflows/environment.ts). The step activities are test doubles: they stand in
// for re-verification, the reservation and signing, the broadcast and the inclusion watch against
// PostgreSQL and the chain, so each test can have any step decide the settlement, or fail and
// come back, and see which steps the workflow then runs, what it answers and what it records for
// the Web UI. The steps themselves are tested against a real chain (the files of test/settlement/);
// runs recorded before the per-step patch replay in
// test/operations/settlement-replay.test.ts.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Context } from '@temporalio/activity';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import type { SettlementActivities, SettlementOutcome } from '../../activities/settlement/types.ts';
import type { FacilitatorConfig } from '../../facilitator/config.ts';
import { startSettlementWorkflow, startWatchWorkflow } from '../../facilitator-service/workflow-start.ts';
import { ErrorClass, Payer, SettlementStatus, TxHash } from '../../temporal/search-attributes.ts';
import { searchAttributesOf, workflowHarness, type WorkflowHarness } from './environment.ts';

const PAYER = '0x00000000000000000000000000000000000000aa';
const TX = `0x${'ab'.repeat(32)}`;
const INCLUSION_TIMEOUT_MS = 45_000;

type Steps = Partial<{ [K in keyof SettlementActivities]: (attempt: number) => ReturnType<SettlementActivities[K]> }>;
type Call = { activity: string; args: unknown[] };

/**
 * Doubles of the facilitator worker's activities that record every call. A step the test does
 * not script rejects `unexpected` (the workflow was not meant to reach it): the steps retry
 * without limit, so failing the activity would only be retried.
 */
function doubles(steps: Steps) {
  const calls: Call[] = [];
  let reject!: (err: Error) => void;
  const unexpected = new Promise<never>((_, r) => (reject = r));
  unexpected.catch(() => undefined); // awaited only by the test that races it
  const attempts = new Map<string, number>();
  const activities = Object.fromEntries(
    (
      [
        'verifySettlement',
        'claimSettlement',
        'broadcastSettlement',
        'confirmSettlement',
        'watchSettlement',
        'settle',
        'prepareSettlement',
        'deliverSettlement',
      ] as const
    ).map((name) => [
      name,
      async (...args: unknown[]) => {
        calls.push({ activity: name, args });
        const attempt = (attempts.get(name) ?? 0) + 1;
        attempts.set(name, attempt);
        const step = steps[name] as ((attempt: number) => Promise<unknown>) | undefined;
        if (!step) {
          const err = new Error(`the workflow ran ${name}, which this test did not expect`);
          reject(err);
          throw err;
        }
        return step(attempt);
      },
    ]),
  );
  return { activities, calls, unexpected, order: () => calls.map((call) => call.activity) };
}

const settled: SettlementOutcome = { status: 'settled', payer: PAYER, transaction: TX, cause: null };
const verified = async () => ({ step: 'verified' as const, payer: PAYER });
const signed = async () => ({ step: 'signed' as const, payer: PAYER, txHash: TX });
const sent = async () => ({ step: 'sent' as const, txHash: TX, mined: false });
const decided = (outcome: SettlementOutcome) => async () => ({ step: 'decided' as const, outcome });

describe('SettlementWorkflow (time-skipping test server, step activities as test doubles)', function () {
  let h: WorkflowHarness;
  before(async function () {
    this.timeout(120_000); // bundling the workflow code takes seconds on a busy machine
    h = await workflowHarness('facilitator');
  });
  after(async () => h?.teardown());

  const newKey = () => `settle:8453:0x${'cd'.repeat(20)}:${PAYER}:0x${randomUUID().replaceAll('-', '')}`;

  /** Starts the settlement `key` as the facilitator does (facilitator-service/workflow-start.ts). */
  function start(taskQueue: string, key: string) {
    const config = { temporal: { taskQueue }, inclusionTimeoutMs: INCLUSION_TIMEOUT_MS };
    return startSettlementWorkflow(
      h.env.client,
      config as unknown as FacilitatorConfig,
      key,
      { payer: PAYER, summary: 'test settlement' },
      false,
    );
  }

  /** Starts a settlement and awaits its answer (and then `afterwards`, with the worker still running). */
  async function settle(steps: Steps, afterwards?: (key: string) => Promise<unknown>) {
    const key = newKey();
    const d = doubles(steps);
    const result = await h.withWorker(d.activities, async (taskQueue) => {
      const handle = await start(taskQueue, key);
      const outcome = await Promise.race([handle.result(), d.unexpected]);
      return { outcome, later: await Promise.race([afterwards?.(key), d.unexpected]) };
    });
    return { key, ...result, d, attributes: await searchAttributesOf(h.env, key) };
  }

  it('every step goes through: verify, reserve, broadcast, confirm; settled with its transaction in the search attributes, no watcher', async () => {
    const run = await settle({
      verifySettlement: verified,
      claimSettlement: signed,
      broadcastSettlement: sent,
      confirmSettlement: async () => settled,
    });
    assert.deepEqual(run.outcome, settled);
    assert.deepEqual(run.d.order(), [
      'verifySettlement',
      'claimSettlement',
      'broadcastSettlement',
      'confirmSettlement',
    ]);
    assert.deepEqual(
      run.d.calls[3].args,
      [run.key, INCLUSION_TIMEOUT_MS],
      'confirm waits the configured inclusion timeout',
    );
    assert.ok(run.d.calls.slice(0, 3).every((call) => call.args.length === 1 && call.args[0] === run.key));
    assert.equal(run.attributes[SettlementStatus.name], 'settled');
    assert.equal(run.attributes[TxHash.name], TX);
    assert.equal(run.attributes[Payer.name], PAYER);
    assert.equal(run.attributes[ErrorClass.name], undefined);
    await assert.rejects(h.env.client.workflow.getHandle(`watch:${run.key}`).describe(), {
      name: 'WorkflowNotFoundError',
    });
  });

  it('re-verification refuses it: nothing is reserved or sent, the refusal is the answer and its cause the error class', async () => {
    const refused: SettlementOutcome = {
      status: 'failed',
      payer: PAYER,
      transaction: null,
      cause: 'insufficient_funds',
    };
    const run = await settle({ verifySettlement: decided(refused) });
    assert.deepEqual(run.outcome, refused);
    assert.deepEqual(run.d.order(), ['verifySettlement']);
    assert.equal(run.attributes[SettlementStatus.name], 'failed');
    assert.equal(run.attributes[ErrorClass.name], 'insufficient_funds');
    assert.equal(run.attributes[TxHash.name], undefined);
  });

  it('a guardrail refuses it at the reservation: nothing is broadcast', async () => {
    const refused: SettlementOutcome = {
      status: 'rejected',
      payer: PAYER,
      transaction: null,
      cause: 'over_daily_ceiling',
    };
    const run = await settle({ verifySettlement: verified, claimSettlement: decided(refused) });
    assert.deepEqual(run.outcome, refused);
    assert.deepEqual(run.d.order(), ['verifySettlement', 'claimSettlement']);
    assert.equal(run.attributes[SettlementStatus.name], 'rejected');
    assert.equal(run.attributes[ErrorClass.name], 'over_daily_ceiling');
  });

  it('bytes signed by an earlier run: the reservation is not run again, the stored transaction is delivered', async () => {
    const run = await settle({
      verifySettlement: signed,
      broadcastSettlement: sent,
      confirmSettlement: async () => settled,
    });
    assert.deepEqual(run.outcome, settled);
    assert.deepEqual(run.d.order(), ['verifySettlement', 'broadcastSettlement', 'confirmSettlement']);
  });

  it('the broadcast decides it (the authorization was used meanwhile): no confirmation is awaited', async () => {
    const used: SettlementOutcome = { status: 'failed', payer: PAYER, transaction: null, cause: 'nonce_used' };
    const run = await settle({
      verifySettlement: verified,
      claimSettlement: signed,
      broadcastSettlement: decided(used),
    });
    assert.deepEqual(run.outcome, used);
    assert.deepEqual(run.d.order(), ['verifySettlement', 'claimSettlement', 'broadcastSettlement']);
    assert.equal(run.attributes[SettlementStatus.name], 'failed');
  });

  it('once signed, a failing broadcast is retried until the node takes it', async () => {
    // The steps are local activities: the worker itself sleeps their backoffs (100 ms doubling),
    // which the server cannot skip, so the node is down for three attempts only.
    const run = await settle({
      verifySettlement: verified,
      claimSettlement: signed,
      broadcastSettlement: async (attempt) => {
        if (attempt <= 3) throw new Error('RPC node unreachable');
        return sent();
      },
      confirmSettlement: async () => settled,
    });
    assert.deepEqual(run.outcome, settled);
    assert.deepEqual(run.d.order(), [
      'verifySettlement',
      'claimSettlement',
      'broadcastSettlement',
      'broadcastSettlement',
      'broadcastSettlement',
      'broadcastSettlement',
      'confirmSettlement',
    ]);
  });

  it('a watcher retries a failing watch until the chain answers (minutes of backoff, skipped)', async () => {
    // Started as the sweeper restarts a pending settlement's watcher (startWatchWorkflow).
    const key = newKey();
    const d = doubles({
      watchSettlement: async (attempt) => {
        if (attempt <= 8) throw new Error('RPC node unreachable');
        return settled;
      },
    });
    const outcome = await h.withWorker(d.activities, async (taskQueue) => {
      const config = { temporal: { taskQueue } } as unknown as FacilitatorConfig;
      await startWatchWorkflow(h.env.client, config, key);
      return Promise.race([h.env.client.workflow.getHandle(`watch:${key}`).result(), d.unexpected]);
    });
    assert.deepEqual(outcome, settled);
    assert.equal(d.calls.length, 9);
    assert.ok(d.calls.every((call) => call.activity === 'watchSettlement' && call.args[0] === key));
    const attributes = await searchAttributesOf(h.env, `watch:${key}`);
    assert.equal(attributes[SettlementStatus.name], 'settled');
    assert.equal(attributes[TxHash.name], TX);
  });

  it('the same authorization settled twice: the second start attaches to the running settlement, a third after it closed is refused; the steps ran once', async () => {
    const key = newKey();
    let verifying!: () => void;
    const verifyStarted = new Promise<void>((resolve) => (verifying = resolve));
    let answer!: () => void;
    const answered = new Promise<void>((resolve) => (answer = resolve));
    const d = doubles({
      verifySettlement: async () => {
        verifying();
        await answered;
        return verified();
      },
      claimSettlement: signed,
      broadcastSettlement: sent,
      confirmSettlement: async () => settled,
    });
    await h.withWorker(d.activities, async (taskQueue) => {
      const first = await start(taskQueue, key);
      await verifyStarted;
      const second = await start(taskQueue, key);
      const runs = await Promise.all([first.describe(), second.describe()]);
      assert.equal(runs[1].runId, runs[0].runId, 'attached to the running settlement');
      answer();
      assert.deepEqual(await Promise.race([second.result(), d.unexpected]), settled);
      await assert.rejects(start(taskQueue, key), WorkflowExecutionAlreadyStartedError);
    });
    assert.deepEqual(d.order(), ['verifySettlement', 'claimSettlement', 'broadcastSettlement', 'confirmSettlement']);
  });

  const pending: SettlementOutcome = { status: 'pending', payer: PAYER, transaction: TX, cause: null };
  const throughBroadcast: Steps = { verifySettlement: verified, claimSettlement: signed, broadcastSettlement: sent };

  // Last in this file: once a workflow has started a child, this test server (temporal-test-server
  // 1.40.0) no longer skips time for the tests after it (the next needs none).
  it('not included in time: answers pending, and a watcher that outlives the run records the settlement once it lands', async () => {
    const run = await settle(
      {
        ...throughBroadcast,
        confirmSettlement: async () => pending,
        watchSettlement: async () => settled,
      },
      // The watcher's id is known (watch:{key}); its answer is awaited with the worker still running.
      (key) => h.env.client.workflow.getHandle(`watch:${key}`).result(),
    );
    assert.deepEqual(run.outcome, pending);
    assert.equal(run.attributes[SettlementStatus.name], 'pending');
    assert.deepEqual(run.later, settled);
    assert.deepEqual(run.d.calls.at(-1), { activity: 'watchSettlement', args: [run.key] });
    const watched = await searchAttributesOf(h.env, `watch:${run.key}`);
    assert.equal(watched[SettlementStatus.name], 'settled');
    assert.equal(watched[TxHash.name], TX);
  });

  it('not included in time, its watcher already started by the sweeper (the run idle past its bound): the run still answers pending, and that watcher records the settlement', async () => {
    const run = await settle(
      {
        ...throughBroadcast,
        confirmSettlement: async () => {
          // The sweeper's start, on the same queue, while the confirm step still runs.
          const { taskQueue, workflowExecution } = Context.current().info;
          assert.ok(workflowExecution, 'run by a workflow');
          const config = { temporal: { taskQueue } } as unknown as FacilitatorConfig;
          await startWatchWorkflow(h.env.client, config, workflowExecution.workflowId);
          return pending;
        },
        watchSettlement: async () => settled,
      },
      (key) => h.env.client.workflow.getHandle(`watch:${key}`).result(),
    );
    assert.deepEqual(run.outcome, pending, 'answered, not failed');
    assert.equal(run.attributes[SettlementStatus.name], 'pending');
    assert.deepEqual(run.later, settled);
    assert.equal(run.d.order().filter((name) => name === 'watchSettlement').length, 1, 'one watcher');
  });
});
