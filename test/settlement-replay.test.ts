// Committed SettlementWorkflow histories (test/histories/facilitator/) must replay against
// today's workflow code without non-determinism. With RECORD_HISTORIES=1 this file first runs
// the recorded scenarios on the real stack and rewrites them: settled, refused by
// re-verification (a payer without funds), refused by a guardrail.
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Worker } from '@temporalio/worker';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { stack } from './support/stack.ts';
import { facilitatorBundle } from './support/facilitator.ts';
import { newAccount, newPayTo, newPayer, requirements, settleBody, signPayment } from './support/x402.ts';
import { settlementKey } from '../facilitator/store/records.ts';

const dir = new URL('./histories/facilitator/', import.meta.url);

async function record(name: string, run: () => Promise<{ payer: string; nonce: string }>): Promise<void> {
  const { payer, nonce } = await run();
  const handle = stack().temporal.workflow.getHandle(settlementKey(8453, stack().infra.tokenAddress, payer, nonce));
  // The fast path answers before it starts the workflow: wait for the run to exist.
  for (let i = 0; ; i++) {
    try {
      await handle.result();
      break;
    } catch (err) {
      if (i >= 50 || (err as Error).name !== 'WorkflowNotFoundError') throw err;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  writeFileSync(new URL(`${name}.json`, dir), `${historyToJSON(await handle.fetchHistory())}\n`);
}

describe('settlement workflow replay', function () {
  this.timeout(120_000);

  before(async function () {
    if (!process.env.RECORD_HISTORIES) return;
    const account = await newAccount('replay-recorder');
    const capped = await newAccount('replay-capped', { maxPerTx: 1n });
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
      const payment = await signPayment(payer, { payTo, value: 1_000n });
      assert.equal((await capped.client.post('/settle', settleBody(payment, requirements(payTo, 1_000n)))).status, 429);
      return { payer: payer.address, nonce: payment.payload.authorization.nonce };
    });
    await account.client.close();
    await capped.client.close();
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
