// PolicyDecisionRetentionWorkflow's own logic on Temporal's time-skipping test server
// (test/workflows/environment.ts). The purge activities are test doubles that answer how many
// rows they "deleted", so each test can shape a backlog (full batches, then a short one) or an
// outage and see how the workflow batches, carries its cutoff across continue-as-new and gives
// up. Its Schedule cannot run on this server (it refuses Schedules), so the tests start the
// workflow directly, with the input the schedule gives it. The real deletes are tested against
// PostgreSQL (test/management/policy-retention.test.ts, test/proxy/body-retention.test.ts).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { WorkflowFailedError } from '@temporalio/client';
import type { RetentionInput } from '../../workflows/retention.ts';
import { workflowHarness, type WorkflowHarness } from './environment.ts';

const DAY_MS = 86_400_000;

type Purge = { olderThanMs: number; limit: number };
type Call = { activity: string; input: Purge };

/** Doubles of the four purges: each answers from its list of deleted counts, in turn (then 0). */
function doubles(deleted: {
  decisions: (attempt: number) => number;
  bodies?: number[];
  tasks?: number[];
  sessions?: number[];
  payments?: number[];
}) {
  const calls: Call[] = [];
  let decisionAttempts = 0;
  const from = (list: number[] | undefined, activity: string) => {
    const left = [...(list ?? [])];
    return async (input: Purge) => {
      calls.push({ activity, input });
      return left.shift() ?? 0;
    };
  };
  const activities = {
    purgeCapturedBodies: from(deleted.bodies, 'purgeCapturedBodies'),
    purgeA2aTasks: from(deleted.tasks, 'purgeA2aTasks'),
    purgeMcpServerSessions: from(deleted.sessions, 'purgeMcpServerSessions'),
    purgeUnboundSignedPayments: from(deleted.payments, 'purgeUnboundSignedPayments'),
    async purgePolicyDecisions(input: Purge) {
      calls.push({ activity: 'purgePolicyDecisions', input });
      return deleted.decisions(++decisionAttempts);
    },
  };
  return { activities, calls, named: (activity: string) => calls.filter((call) => call.activity === activity) };
}

describe('PolicyDecisionRetentionWorkflow (time-skipping test server, purges as test doubles)', function () {
  let h: WorkflowHarness;
  before(async function () {
    this.timeout(120_000); // bundling the workflow code takes seconds on a busy machine
    h = await workflowHarness('gateway');
  });
  after(async () => h?.teardown());

  async function purge(input: RetentionInput, d: ReturnType<typeof doubles>) {
    return h.withWorker(d.activities, async (taskQueue) => {
      const before = await h.env.currentTimeMs();
      const handle = await h.env.client.workflow.start('PolicyDecisionRetentionWorkflow', {
        taskQueue,
        workflowId: `retention-${randomUUID()}`,
        args: [input],
      });
      const result = await handle.result();
      const described = await handle.describe();
      return {
        result,
        before,
        after: await h.env.currentTimeMs(),
        runs: described.runId !== handle.firstExecutionRunId,
      };
    });
  }

  it('bodies, A2A tasks and MCP server sessions first, each with its own cutoff, then decisions until a batch comes back short', async () => {
    const d = doubles({ bodies: [5, 5, 2], tasks: [1], sessions: [5, 0], decisions: (n) => [5, 5, 4][n - 1] ?? 0 });
    const run = await purge(
      { retentionDays: 30, bodyRetentionDays: 7, a2aTaskRetentionDays: 14, mcpSessionRetentionDays: 3, batchSize: 5 },
      d,
    );
    assert.deepEqual(
      d.calls.map((call) => call.activity),
      [
        ...Array(3).fill('purgeCapturedBodies'),
        'purgeA2aTasks',
        ...Array(2).fill('purgeMcpServerSessions'),
        ...Array(3).fill('purgePolicyDecisions'),
      ],
    );
    assert.ok(d.calls.every((call) => call.input.limit === 5));
    // Each cutoff is "now" (the workflow's time, between the start and the end) less its retention.
    const within = (cutoff: number, days: number) =>
      cutoff >= run.before - days * DAY_MS && cutoff <= run.after - days * DAY_MS;
    assert.ok(d.named('purgeCapturedBodies').every((call) => within(call.input.olderThanMs, 7)));
    assert.ok(within(d.named('purgeA2aTasks')[0].input.olderThanMs, 14));
    assert.ok(d.named('purgeMcpServerSessions').every((call) => within(call.input.olderThanMs, 3)));
    const decisions = d.named('purgePolicyDecisions');
    assert.ok(within(decisions[0].input.olderThanMs, 30));
    assert.deepEqual(run.result, { deleted: 14, cutoff: new Date(decisions[0].input.olderThanMs).toISOString() });
  });

  it('a long purge continues as new after its batches per run, with the same cutoff and the count carried', async () => {
    const d = doubles({ bodies: [1], decisions: (n) => (n <= 5 ? 10 : 3) });
    const run = await purge({ retentionDays: 30, bodyRetentionDays: 7, batchSize: 10, maxBatchesPerRun: 2 }, d);
    const decisions = d.named('purgePolicyDecisions');
    assert.equal(decisions.length, 6);
    assert.equal(new Set(decisions.map((call) => call.input.olderThanMs)).size, 1, 'one cutoff for the whole purge');
    assert.equal(run.runs, true, 'the purge went on in a new run');
    assert.equal(run.result.deleted, 53);
    assert.equal(d.named('purgeCapturedBodies').length, 1, 'bodies are purged once per purge, not per run');
  });

  it('retention of bodies, tasks and sessions unset: only decisions are purged', async () => {
    const d = doubles({ bodies: [9], tasks: [9], sessions: [9], decisions: () => 0 });
    const run = await purge({ retentionDays: 30 }, d);
    assert.deepEqual(
      d.calls.map((call) => call.activity),
      ['purgePolicyDecisions'],
    );
    assert.equal(d.calls[0].input.limit, 1000, 'the default batch');
    assert.equal(run.result.deleted, 0);
  });

  it('unbound signed payments are cleared in bounded batches with a cutoff of minutes, once per purge', async () => {
    const d = doubles({ payments: [2, 2, 1], decisions: () => 0 });
    const run = await purge({ retentionDays: 30, unboundPaymentRetentionMinutes: 60, batchSize: 2 }, d);
    const payments = d.named('purgeUnboundSignedPayments');
    assert.equal(payments.length, 3, 'until a batch comes back short');
    for (const { input } of payments) {
      assert.equal(input.limit, 2);
      assert.ok(input.olderThanMs >= run.before - 60 * 60_000 && input.olderThanMs <= run.after - 60 * 60_000);
    }
    assert.equal(run.result.deleted, 0, 'cleared signatures are not counted as deleted decisions');
  });

  it('a purge failing on all its 10 attempts fails the run (minutes of backoff, skipped)', async () => {
    const d = doubles({
      decisions: () => {
        throw new Error('database unavailable');
      },
    });
    await assert.rejects(purge({ retentionDays: 30 }, d), WorkflowFailedError);
    assert.equal(d.named('purgePolicyDecisions').length, 10);
  });
});
