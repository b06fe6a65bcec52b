// Policy decision retention: decisions are made through the API (a deny-all policy, so nothing is
// forwarded), some are then aged in PostgreSQL (the one step with no public interface: time
// cannot be made to pass), and the purge runs as a real Temporal workflow on the stack's worker,
// directly and through its Schedule. Checked: only decisions older than the retention go, in
// batches no larger than asked, continuing as new when a run reaches its batch limit; the
// schedule exists with the configured retention and its triggered run purges; the workflow's
// history replays; a retention of 0 removes the schedule. And the signed payments that payment
// bindings never bound to a call still hold are cleared once older than their bound.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { Worker } from '@temporalio/worker';
import type { History } from '@temporalio/common/lib/proto-utils.js';
import { stack } from '../support/stack.ts';
import { call } from '../support/http.ts';
import { createAgent } from '../support/proxy-helpers.ts';
import { waitFor } from '../support/wait.ts';
import { ensureRetentionSchedule, loadRetention } from '../../temporal/retention-schedule.ts';

const loadRetentionDays = (env: NodeJS.ProcessEnv) => loadRetention(env).retentionDays;
import type { PolicyDecisionRetentionWorkflow } from '../../workflows/retention.ts';

const DAY_MS = 86_400_000;

/** A tenant with a deny-all policy and `count` recorded decisions (403 calls); answers their ids, newest first. */
async function tenantWithDecisions(count: number): Promise<{ token: string; ids: string[] }> {
  const token = await stack().token(`t-retention-${randomUUID()}`);
  const put = await call('PUT', '/v1/policy', { token, json: { default: 'deny', on_error: 'deny', rules: [] } });
  assert.equal(put.status, 200, put.text);
  const agentId = await createAgent(token, { upstream_url: 'http://127.0.0.1:9/never' });
  for (let i = 0; i < count; i++)
    assert.equal((await call('POST', `/v1/proxy/${agentId}`, { token, json: { i } })).status, 403);
  return { token, ids: await decisionIds(token) };
}

async function decisionIds(token: string): Promise<string[]> {
  const res = await call('GET', '/v1/policy/decisions?limit=100', { token });
  assert.equal(res.status, 200, res.text);
  return (res.json.data as Array<{ id: string }>).map((d) => d.id);
}

/** Ages decisions by `days` (PostgreSQL directly: the only way to let time pass). */
async function age(ids: string[], days: number): Promise<void> {
  for (const id of ids)
    await stack()
      .orm.em.getConnection()
      .execute(`update policy_decisions set created_at = now() - make_interval(days => ?) where id = ?`, [days, id]);
}

/** The histories of a workflow's chain of runs, first to last (followed through continue-as-new). */
async function runHistories(workflowId: string, firstRunId: string): Promise<History[]> {
  const histories: History[] = [];
  let runId: string | null | undefined = firstRunId;
  while (runId) {
    const history: History = await stack().temporal.workflow.getHandle(workflowId, runId).fetchHistory();
    histories.push(history);
    runId = history.events?.find((e) => e.workflowExecutionContinuedAsNewEventAttributes)
      ?.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId;
  }
  return histories;
}

describe('policy decision retention', function () {
  this.timeout(120_000);

  it('reads POLICY_DECISION_RETENTION_DAYS (default 30, 0 = keep forever) and refuses nonsense', () => {
    assert.equal(loadRetentionDays({}), 30);
    assert.equal(loadRetentionDays({ POLICY_DECISION_RETENTION_DAYS: '7' }), 7);
    assert.equal(loadRetentionDays({ POLICY_DECISION_RETENTION_DAYS: '0' }), 0);
    for (const bad of ['-1', '1.5', 'week'])
      assert.throws(() => loadRetentionDays({ POLICY_DECISION_RETENTION_DAYS: bad }), /POLICY_DECISION_RETENTION_DAYS/);
  });

  it('deletes only decisions older than the retention, in bounded batches, continuing as new', async () => {
    const { token, ids } = await tenantWithDecisions(7);
    assert.equal(ids.length, 7);
    const [fresh, nearlyDue, ...old] = ids;
    await age([nearlyDue], 29);
    await age(old, 40);

    const s = stack();
    const workflowId = `retention-${randomUUID()}`;
    // 5 old rows, batches of 2, 2 batches per run: run 1 deletes 2+2 and continues as new,
    // run 2 deletes the last one (a short batch ends the purge).
    const handle = await s.temporal.workflow.start<typeof PolicyDecisionRetentionWorkflow>(
      'PolicyDecisionRetentionWorkflow',
      {
        taskQueue: s.config.temporal.taskQueue,
        workflowId,
        args: [{ retentionDays: 30, batchSize: 2, maxBatchesPerRun: 2 }],
      },
    );
    const result = await handle.result();
    assert.ok(result.deleted >= 5, `deleted ${result.deleted}`);
    assert.ok(Date.parse(result.cutoff) < Date.now() - 29 * DAY_MS);
    assert.deepEqual(await decisionIds(token), [fresh, nearlyDue]);

    // Walk the chain of runs: every run stayed within its batch bound, and the first handed
    // over to a second. Each run's history replays against today's workflow code.
    const batchesPerRun: number[] = [];
    for (const history of await runHistories(workflowId, handle.firstExecutionRunId)) {
      batchesPerRun.push((history.events ?? []).filter((e) => e.activityTaskCompletedEventAttributes).length);
      await Worker.runReplayHistory({ workflowBundle: s.workflowBundle }, history, workflowId);
    }
    assert.ok(batchesPerRun.length >= 2, `runs: ${batchesPerRun.join(', ')}`);
    assert.equal(batchesPerRun[0], 2);
    for (const batches of batchesPerRun) assert.ok(batches <= 2, `a run made ${batches} batches`);
  });

  it('runs on a Temporal Schedule with the configured retention; a triggered run purges; 0 days removes it', async () => {
    const { token, ids } = await tenantWithDecisions(2);
    await age([ids[1]], 12);
    const s = stack();
    const scheduleId = `retention-test-${randomUUID()}`;
    assert.equal(
      await ensureRetentionSchedule(s.temporal, {
        scheduleId,
        taskQueue: s.config.temporal.taskQueue,
        retentionDays: 30,
      }),
      'created',
    );
    // Workers restart with a new setting: the schedule follows it.
    assert.equal(
      await ensureRetentionSchedule(s.temporal, {
        scheduleId,
        taskQueue: s.config.temporal.taskQueue,
        retentionDays: 10,
      }),
      'updated',
    );
    const handle = s.temporal.schedule.getHandle(scheduleId);
    try {
      const described = await handle.describe();
      assert.equal(described.action.type, 'startWorkflow');
      assert.equal(
        described.action.type === 'startWorkflow' && described.action.workflowType,
        'PolicyDecisionRetentionWorkflow',
      );
      assert.deepEqual(described.action.type === 'startWorkflow' && described.action.args, [{ retentionDays: 10 }]);
      assert.equal(described.spec.intervals?.[0]?.every, 3_600_000);

      await handle.trigger();
      await waitFor(async () => (await decisionIds(token)).length === 1, {
        timeoutMs: 30_000,
        everyMs: 200,
        what: 'the triggered purge to leave one decision',
        state: async () => `${(await decisionIds(token)).length} decisions left`,
      });
      assert.deepEqual(await decisionIds(token), [ids[0]]);
    } finally {
      assert.equal(
        await ensureRetentionSchedule(s.temporal, {
          scheduleId,
          taskQueue: s.config.temporal.taskQueue,
          retentionDays: 0,
        }),
        'deleted',
      );
    }
    assert.equal(
      await ensureRetentionSchedule(s.temporal, {
        scheduleId,
        taskQueue: s.config.temporal.taskQueue,
        retentionDays: 0,
      }),
      'absent',
    );
  });

  it('clears the signed payment of bindings never bound to a call once older than the bound, and no other', async () => {
    // The bindings as a call leaves them when it is refused or its process dies between the
    // payment's record and its binding (no public interface stops a call there), aged in PostgreSQL.
    const s = stack();
    const execute = (sql: string, params: unknown[]) => s.orm.em.getConnection().execute(sql, params);
    const tenant = `t-unbound-${randomUUID()}`;
    const signed = JSON.stringify({ payment: { payload: { signature: '0xsigned' } }, requirements: {} });
    const binding = async (minutesOld: number, invocationId: string | null) => {
      const id = `pay_${randomUUID()}`;
      await execute(
        `insert into payment_claims (id, tenant_id, agent_id, network, asset, payer, nonce, amount, status, invocation_id,
                                     signed_payment, created_at, updated_at)
         values (?, ?, 'agent', 'eip155:8453', '0xasset', '0xpayer', ?, '1', 'claimed', ?, ?::jsonb,
                 now() - make_interval(mins => ?), now() - make_interval(mins => ?))`,
        [id, tenant, `upto-${id}`, invocationId, signed, minutesOld, minutesOld],
      );
      return id;
    };
    const stale = await binding(120, null);
    const recent = await binding(10, null);
    const bound = await binding(120, `inv_${randomUUID()}`);

    const workflowId = `retention-${randomUUID()}`;
    const handle = await s.temporal.workflow.start<typeof PolicyDecisionRetentionWorkflow>(
      'PolicyDecisionRetentionWorkflow',
      {
        taskQueue: s.config.temporal.taskQueue,
        workflowId,
        args: [{ retentionDays: 30, unboundPaymentRetentionMinutes: 60 }],
      },
    );
    await handle.result();
    const rows = (await execute(
      `select id, signed_payment is not null as kept from payment_claims where tenant_id = ?`,
      [tenant],
    )) as Array<{ id: string; kept: boolean }>;
    const kept = new Map(rows.map((r) => [r.id, r.kept]));
    assert.deepEqual(
      { stale: kept.get(stale), recent: kept.get(recent), bound: kept.get(bound) },
      { stale: false, recent: true, bound: true },
    );
    await Worker.runReplayHistory({ workflowBundle: s.workflowBundle }, await handle.fetchHistory(), workflowId);
  });

  it('reads UNBOUND_PAYMENT_RETENTION_MINUTES (default 60, never 0)', () => {
    assert.equal(loadRetention({}).unboundPaymentRetentionMinutes, 60);
    assert.equal(loadRetention({ UNBOUND_PAYMENT_RETENTION_MINUTES: '5' }).unboundPaymentRetentionMinutes, 5);
    for (const bad of ['0', '-1', '1.5', '20000'])
      assert.throws(
        () => loadRetention({ UNBOUND_PAYMENT_RETENTION_MINUTES: bad }),
        /UNBOUND_PAYMENT_RETENTION_MINUTES/,
      );
  });
});
