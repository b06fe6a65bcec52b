// BudgetAlertWorkflow's own logic on Temporal's time-skipping test server
// (test/workflows/environment.ts), its delivery activity a test double: a receiver that fails
// is retried with backoff until it takes the alert, the workflow answering the delivery; one that
// never does is given up on after a day. The history carries ids and numbers only (no body, no
// secret). The committed replay history (test/histories/budget-alert-delivered.json, replayed by
// test/operations/replay.test.ts) is this file's first run, written with
// BUDGET_ALERT_HISTORY=<path>.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import { historyToJSON } from '@temporalio/common/lib/proto-utils.js';
import { WorkflowFailedError } from '@temporalio/client';
import type { AlertFacts } from '../../activities/budget-alerts.ts';
import { workflowHarness, type WorkflowHarness } from './environment.ts';

const ALERT: AlertFacts = {
  budgetId: 'bud_0193a000-0000-7000-8000-000000000001',
  windowStartMs: 1_765_000_000_000,
  threshold: 0.8,
};

const notTaken = (status: number) =>
  ApplicationFailure.create({
    message: `webhook answered ${status}`,
    type: 'AlertNotDelivered',
    category: ApplicationFailureCategory.BENIGN,
  });

describe('BudgetAlertWorkflow (time-skipping test server, delivery as a test double)', function () {
  let h: WorkflowHarness;
  before(async function () {
    this.timeout(120_000);
    h = await workflowHarness('gateway');
  });
  after(async () => h?.teardown());

  it('retries a receiver that fails twice and answers the delivery once it takes the alert', async () => {
    const seen: AlertFacts[] = [];
    const activities = {
      async deliverBudgetAlert(alert: AlertFacts) {
        seen.push(alert);
        if (seen.length <= 2) throw notTaken(503);
        return { outcome: 'delivered' as const, status: 204 };
      },
    };
    const workflowId = `budget-alert-${randomUUID()}`;
    const result = await h.withWorker(activities, (taskQueue) =>
      h.env.client.workflow.execute('BudgetAlertWorkflow', { taskQueue, workflowId, args: [ALERT] }),
    );
    assert.deepEqual(result, { outcome: 'delivered', status: 204 });
    assert.equal(seen.length, 3);
    assert.deepEqual(seen[2], ALERT);
    const history = await h.env.client.workflow.getHandle(workflowId).fetchHistory();
    const json = historyToJSON(history);
    assert.ok(!/whsec_|budget\.threshold_crossed/.test(json), 'no secret or body in the history');
    if (process.env.BUDGET_ALERT_HISTORY)
      writeFileSync(process.env.BUDGET_ALERT_HISTORY, `${JSON.stringify(JSON.parse(json), null, 2)}\n`);
  });

  it('gives up on a receiver that never takes it after a day of retries', async () => {
    let tries = 0;
    const activities = {
      async deliverBudgetAlert() {
        tries++;
        throw notTaken(500);
      },
    };
    await assert.rejects(
      h.withWorker(activities, (taskQueue) =>
        h.env.client.workflow.execute('BudgetAlertWorkflow', {
          taskQueue,
          workflowId: `budget-alert-${randomUUID()}`,
          args: [ALERT],
        }),
      ),
      (err) => err instanceof WorkflowFailedError,
    );
    // Backoff from 1 s doubling to 10 min: about 150 tries in 24 h, far fewer than one a second.
    assert.ok(tries > 10 && tries < 200, `${tries} tries`);
  });

  it('answers a dropped alert (its budget deleted) without retrying', async () => {
    let tries = 0;
    const activities = {
      async deliverBudgetAlert() {
        tries++;
        return { outcome: 'dropped' as const, reason: 'budget deleted' };
      },
    };
    const result = await h.withWorker(activities, (taskQueue) =>
      h.env.client.workflow.execute('BudgetAlertWorkflow', {
        taskQueue,
        workflowId: `budget-alert-${randomUUID()}`,
        args: [ALERT],
      }),
    );
    assert.deepEqual(result, { outcome: 'dropped', reason: 'budget deleted' });
    assert.equal(tries, 1);
  });
});
