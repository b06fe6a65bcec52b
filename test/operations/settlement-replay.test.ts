// Committed SettlementWorkflow histories (test/histories/facilitator/) must replay against
// today's workflow code without non-determinism. With RECORD_HISTORIES=1 this file first runs
// the recorded scenarios on the real stack and rewrites them: settled, refused by
// re-verification (a payer without funds), refused by a guardrail.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Worker } from '@temporalio/worker';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { stack } from '../support/stack.ts';
import { facilitatorBundle } from '../support/facilitator.ts';
import { waitFor } from '../support/wait.ts';
import { newAccount, newPayTo, newPayer, requirements, settleBody, signPayment } from '../support/x402.ts';
import { settlementKey } from '../../facilitator/store/records.ts';

const dir = new URL('../histories/facilitator/', import.meta.url);

type Payloads = { payloads: { data: string }[] };
const decode = (payloads: Payloads) =>
  JSON.parse(Buffer.from(payloads.payloads[0].data, 'base64').toString('utf8')) as Record<string, unknown>;

/** The workflow's result; the fast path answers before it starts the workflow, so it may not exist yet. */
async function waitForResult(handle: { result(): Promise<unknown> }): Promise<void> {
  await waitFor(
    () =>
      handle.result().then(
        () => true,
        (err: Error) => {
          if (err.name !== 'WorkflowNotFoundError') throw err;
          return false;
        },
      ),
    { timeoutMs: 5_000, everyMs: 100, what: 'the settlement workflow to exist and close' },
  );
}

async function record(name: string, run: () => Promise<{ payer: string; nonce: string }>): Promise<void> {
  const { payer, nonce } = await run();
  const handle = stack().temporal.workflow.getHandle(settlementKey(8453, stack().infra.tokenAddress, payer, nonce));
  await waitForResult(handle);
  writeFileSync(new URL(`${name}.json`, dir), `${historyToJSON(await handle.fetchHistory())}\n`);
}

describe('settlement workflow replay', function () {
  this.timeout(120_000);

  before(async function () {
    if (!process.env.RECORD_HISTORIES) return;
    const account = await newAccount('replay-recorder');
    // A daily ceiling that one settlement of 1,000 leaves too little of for a second.
    const capped = await newAccount('replay-capped', { dailyCeiling: 1_500n });
    const payTo = newPayTo();
    const payer = await newPayer(1_000_000n);
    await record('settlement-settled', async () => {
      const payment = await signPayment(payer, { payTo, value: 1_000n });
      assert.equal(
        (await account.client.post('/settle', settleBody(payment, requirements(payTo, 1_000n)))).json.success,
        true,
      );
      return { payer: payer.address, nonce: payment.payload.authorization.nonce };
    });
    await record('settlement-rejected', async () => {
      // Refused by re-verification on the chain (the payer cannot pay), not by the handler's checks.
      const broke = await newPayer(0n);
      const payment = await signPayment(broke, { payTo, value: 1_000n });
      assert.equal(
        (await account.client.post('/settle', settleBody(payment, requirements(payTo, 1_000n)))).json.success,
        false,
      );
      return { payer: broke.address, nonce: payment.payload.authorization.nonce };
    });
    await record('settlement-guardrail', async () => {
      const first = await signPayment(payer, { payTo, value: 1_000n });
      assert.equal(
        (await capped.client.post('/settle', settleBody(first, requirements(payTo, 1_000n)))).json.success,
        true,
      );
      const payment = await signPayment(payer, { payTo, value: 1_000n });
      assert.equal((await capped.client.post('/settle', settleBody(payment, requirements(payTo, 1_000n)))).status, 429);
      return { payer: payer.address, nonce: payment.payload.authorization.nonce };
    });
    await account.client.close();
    await capped.client.close();
  });

  it('records each step of a settlement as its own local activity with its result (what the Web UI shows)', async () => {
    const account = await newAccount('steps-viewer');
    const payTo = newPayTo();
    const payer = await newPayer(1_000_000n);
    const payment = await signPayment(payer, { payTo, value: 1_000n });
    try {
      const answer = await account.client.post('/settle', settleBody(payment, requirements(payTo, 1_000n)));
      assert.equal(answer.json.success, true);
      const handle = stack().temporal.workflow.getHandle(
        settlementKey(8453, stack().infra.tokenAddress, payer.address, payment.payload.authorization.nonce),
      );
      await waitForResult(handle);
      const history = JSON.parse(historyToJSON(await handle.fetchHistory())) as {
        events: { markerRecordedEventAttributes?: { markerName: string; details: Record<string, Payloads> } }[];
      };
      const steps = history.events
        .map((e) => e.markerRecordedEventAttributes)
        .filter((m) => m?.markerName === 'core_local_activity')
        .map((m) => ({ type: decode(m!.details.data).activity_type, result: decode(m!.details.result) }));
      assert.deepEqual(
        steps.map((step) => step.type),
        ['verifySettlement', 'claimSettlement', 'broadcastSettlement', 'confirmSettlement'],
      );
      assert.equal(steps[0].result.step, 'verified');
      assert.equal(steps[1].result.step, 'signed');
      assert.equal(steps[1].result.txHash, answer.json.transaction);
      assert.equal(steps[3].result.status, 'settled');
      assert.equal(steps[3].result.transaction, answer.json.transaction);
      // The signed authorization never enters the history.
      assert.ok(!JSON.stringify(history).includes(payment.payload.signature.slice(2)));
    } finally {
      await account.client.close();
    }
  });

  it('has committed histories to replay', () => {
    assert.ok(readdirSync(dir).filter((f) => f.endsWith('.json')).length >= 3);
  });

  it('replays every committed settlement history deterministically', async () => {
    const workflowBundle = await facilitatorBundle();
    for (const file of readdirSync(dir).filter((f) => f.endsWith('.json'))) {
      const history = JSON.parse(readFileSync(new URL(file, dir), 'utf8'));
      await Worker.runReplayHistory({ workflowBundle }, history, file);
    }
  });
});
