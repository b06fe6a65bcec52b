// InvocationWorkflow's own logic on Temporal's time-skipping test server (test/workflows/
// environment.ts). The activities are test doubles: performInvocation, abandonInvocation and
// issueReceipt stand in for the upstream call and the database writes, so each test can make
// the call succeed, fail once, or fail on every one of its 20 attempts (about two and a half
// minutes of backoff, skipped by the server) and see what the workflow then does. What the real
// activities do with the row, the upstream and the receipt is tested against the real stack
// (test/proxy/proxy-invocations.test.ts, test/proxy/receipts.test.ts).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { ApplicationFailure } from '@temporalio/common';
import { startInvocationWorkflow, type InvocationStartInput } from '../../temporal/invocation-start.ts';
import type { InvocationOutcome } from '../../activities/invocation.ts';
import { AgentId, InvocationStatus, TenantId } from '../../temporal/search-attributes.ts';
import type { InvocationInput } from '../../workflows/invocation.ts';
import { searchAttributesOf, workflowHarness, type WorkflowHarness } from './environment.ts';

// What the start relay and the routes start the workflow with is what the workflow takes.
void (null as unknown as InvocationStartInput satisfies InvocationInput);

const SUCCEEDED: InvocationOutcome = { status: 'succeeded', upstreamStatus: 200, latencyMs: 12, errorClass: null };
const UPSTREAM_5XX: InvocationOutcome = {
  status: 'failed',
  upstreamStatus: 502,
  latencyMs: 30,
  errorClass: 'upstream_5xx',
};
const ABANDONED: InvocationOutcome = {
  status: 'failed',
  upstreamStatus: null,
  latencyMs: null,
  errorClass: 'internal',
};

const METERED: InvocationOutcome = { ...SUCCEEDED, chargeDue: true };
const SETTLED = { state: 'settled', charge: '10', transaction: '0xabc', error: null, payer: '0x1' };
const CHARGE_ABANDONED = {
  state: 'failed',
  charge: '10',
  transaction: null,
  error: 'settlement_unavailable',
  payer: null,
};

type Call = { activity: string; args: unknown[] };

/** Doubles of the gateway worker's activities that record every call; `perform` decides each attempt. */
function doubles(
  perform: (attempt: number) => Promise<InvocationOutcome>,
  receipt?: (attempt: number) => Promise<void>,
  charge?: (attempt: number) => Promise<unknown>,
) {
  const calls: Call[] = [];
  let performs = 0;
  let receipts = 0;
  let charges = 0;
  const activities = {
    async settleMeteredCharge(...args: unknown[]) {
      calls.push({ activity: 'settleMeteredCharge', args });
      return charge ? charge(++charges) : SETTLED;
    },
    async abandonMeteredCharge(...args: unknown[]) {
      calls.push({ activity: 'abandonMeteredCharge', args });
      return CHARGE_ABANDONED;
    },
    async performInvocation(...args: unknown[]) {
      calls.push({ activity: 'performInvocation', args });
      return perform(++performs);
    },
    async abandonInvocation(...args: unknown[]) {
      calls.push({ activity: 'abandonInvocation', args });
      return ABANDONED;
    },
    async issueReceipt(...args: unknown[]) {
      calls.push({ activity: 'issueReceipt', args });
      await receipt?.(++receipts);
    },
  };
  return { activities, calls, named: (activity: string) => calls.filter((call) => call.activity === activity) };
}

describe('InvocationWorkflow (time-skipping test server, activities as test doubles)', function () {
  let h: WorkflowHarness;
  before(async function () {
    this.timeout(120_000); // bundling the workflow code takes seconds on a busy machine
    h = await workflowHarness('gateway');
  });
  after(async () => h?.teardown());

  const tenantId = 'tenant-workflow-test';
  const agent = (emitReceipts: boolean) => ({ id: `agent-${randomUUID()}`, name: 'test agent', emitReceipts });

  it('started as the API starts it: the outcome becomes the result and the status search attribute, no receipt unless asked', async () => {
    const id = randomUUID();
    const d = doubles(async () => SUCCEEDED);
    const caller = agent(false);
    const result = await h.withWorker(d.activities, async (taskQueue) =>
      (await startInvocationWorkflow(h.env.client, taskQueue, id, tenantId, caller, 2_000)).result(),
    );
    assert.deepEqual(result, SUCCEEDED);
    assert.deepEqual(d.calls, [{ activity: 'performInvocation', args: [id] }]);
    const attributes = await searchAttributesOf(h.env, id);
    assert.equal(attributes[InvocationStatus.name], 'succeeded');
    assert.equal(attributes[TenantId.name], tenantId);
    assert.equal(attributes[AgentId.name], caller.id);
    assert.equal(attributes.ErrorClass, undefined, 'a success records no error class');
  });

  it('an upstream failure that performInvocation recorded is the outcome: status failed and its error class', async () => {
    const id = randomUUID();
    const d = doubles(async () => UPSTREAM_5XX);
    const result = await h.withWorker(d.activities, async (taskQueue) =>
      (await startInvocationWorkflow(h.env.client, taskQueue, id, tenantId, agent(false), 2_000)).result(),
    );
    assert.deepEqual(result, UPSTREAM_5XX);
    assert.deepEqual(d.named('abandonInvocation'), [], 'a recorded failure is not abandoned');
    const attributes = await searchAttributesOf(h.env, id);
    assert.equal(attributes[InvocationStatus.name], 'failed');
    assert.equal(attributes.ErrorClass, 'upstream_5xx');
  });

  it('an agent that emits receipts: the receipt is issued after the outcome, retried until it is stored', async () => {
    const id = randomUUID();
    // The receipt store is down for its first three attempts (1 s, 2 s, 4 s of backoff, skipped).
    const d = doubles(
      async () => SUCCEEDED,
      async (attempt) => {
        if (attempt <= 3) throw new Error('receipt store unavailable');
      },
    );
    const result = await h.withWorker(d.activities, async (taskQueue) =>
      (await startInvocationWorkflow(h.env.client, taskQueue, id, tenantId, agent(true), 2_000)).result(),
    );
    assert.deepEqual(result, SUCCEEDED);
    assert.deepEqual(
      d.calls.map((call) => call.activity),
      ['performInvocation', 'issueReceipt', 'issueReceipt', 'issueReceipt', 'issueReceipt'],
    );
    assert.ok(d.named('issueReceipt').every((call) => call.args[0] === id && call.args.length === 1));
  });

  it('performInvocation failing through all 20 attempts: the row is abandoned with the failure type, whose outcome is returned', async () => {
    const id = randomUUID();
    // Backoff 200 ms doubling to 10 s between 20 attempts: about 150 s the server skips.
    const d = doubles(async () => {
      throw ApplicationFailure.create({ type: 'CredentialUnavailable', message: 'vault sealed' });
    });
    const result = await h.withWorker(d.activities, async (taskQueue) =>
      (await startInvocationWorkflow(h.env.client, taskQueue, id, tenantId, agent(false), 2_000)).result(),
    );
    assert.equal(d.named('performInvocation').length, 20);
    assert.deepEqual(d.named('abandonInvocation'), [
      { activity: 'abandonInvocation', args: [id, 'CredentialUnavailable'] },
    ]);
    assert.deepEqual(result, ABANDONED);
    const attributes = await searchAttributesOf(h.env, id);
    assert.equal(attributes[InvocationStatus.name], 'failed');
    assert.equal(attributes.ErrorClass, ABANDONED.errorClass);
  });

  it('a non-retryable failure is abandoned after its one attempt, with its type', async () => {
    const id = randomUUID();
    const d = doubles(async () => {
      throw ApplicationFailure.create({ type: 'CredentialUnavailable', message: 'no such secret', nonRetryable: true });
    });
    const result = await h.withWorker(d.activities, async (taskQueue) =>
      (await startInvocationWorkflow(h.env.client, taskQueue, id, tenantId, agent(false), 2_000)).result(),
    );
    assert.equal(d.named('performInvocation').length, 1);
    assert.deepEqual(d.named('abandonInvocation'), [
      { activity: 'abandonInvocation', args: [id, 'CredentialUnavailable'] },
    ]);
    assert.deepEqual(result, ABANDONED);
  });

  it('a transient failure is retried, and the attempt that succeeds is the outcome', async () => {
    const id = randomUUID();
    const d = doubles(async (attempt) => {
      if (attempt < 4) throw new Error('database connection reset');
      return SUCCEEDED;
    });
    const result = await h.withWorker(d.activities, async (taskQueue) =>
      (await startInvocationWorkflow(h.env.client, taskQueue, id, tenantId, agent(false), 2_000)).result(),
    );
    assert.deepEqual(result, SUCCEEDED);
    assert.equal(d.named('performInvocation').length, 4);
    assert.deepEqual(d.named('abandonInvocation'), []);
  });

  it('a metered call: its charge is settled after the upstream call and before its receipt, retried while not settled', async () => {
    const id = randomUUID();
    const d = doubles(
      async () => METERED,
      undefined,
      async (attempt) => {
        if (attempt <= 2) throw ApplicationFailure.retryable('no answer', 'ChargeNotSettledYet');
        return SETTLED;
      },
    );
    const result = await h.withWorker(d.activities, async (taskQueue) =>
      (await startInvocationWorkflow(h.env.client, taskQueue, id, tenantId, agent(true), 2_000)).result(),
    );
    assert.deepEqual(result, METERED);
    assert.deepEqual(
      d.calls.map((call) => call.activity),
      ['performInvocation', 'settleMeteredCharge', 'settleMeteredCharge', 'settleMeteredCharge', 'issueReceipt'],
    );
    assert.ok(d.named('settleMeteredCharge').every((call) => call.args[0] === id));
  });

  it('a metered charge whose outcome stays unknown for a day is recorded failed (abandoned), then the receipt', async () => {
    const id = randomUUID();
    const d = doubles(
      async () => METERED,
      undefined,
      async () => {
        throw ApplicationFailure.retryable('no answer', 'ChargeNotSettledYet');
      },
    );
    await h.withWorker(d.activities, async (taskQueue) =>
      (await startInvocationWorkflow(h.env.client, taskQueue, id, tenantId, agent(true), 2_000)).result(),
    );
    assert.ok(d.named('settleMeteredCharge').length > 10, 'retried through the day (skipped by the server)');
    assert.deepEqual(d.named('abandonMeteredCharge'), [{ activity: 'abandonMeteredCharge', args: [id] }]);
    assert.equal(d.calls.at(-1)?.activity, 'issueReceipt');
  });

  it('an outcome that is not metered settles nothing', async () => {
    const id = randomUUID();
    const d = doubles(async () => SUCCEEDED);
    await h.withWorker(d.activities, async (taskQueue) =>
      (await startInvocationWorkflow(h.env.client, taskQueue, id, tenantId, agent(false), 2_000)).result(),
    );
    assert.deepEqual(d.named('settleMeteredCharge'), []);
  });

  describe('the status while the call runs', () => {
    /** The InvocationStatus seen while performInvocation is in flight, and the one after. */
    async function statusDuringAndAfter(input: Omit<InvocationInput, 'invocationId'>) {
      const id = randomUUID();
      let started!: () => void;
      const running = new Promise<void>((resolve) => (started = resolve));
      let finish!: () => void;
      const finished = new Promise<void>((resolve) => (finish = resolve));
      const d = doubles(async () => {
        started();
        await finished;
        return SUCCEEDED;
      });
      return h.withWorker(d.activities, async (taskQueue) => {
        const handle = await h.env.client.workflow.start('InvocationWorkflow', {
          taskQueue,
          workflowId: id,
          args: [{ ...input, invocationId: id }],
          typedSearchAttributes: [{ key: InvocationStatus, value: 'pending' }],
        });
        await running;
        const during = (await searchAttributesOf(h.env, id))[InvocationStatus.name];
        finish();
        await handle.result();
        return { during, after: (await searchAttributesOf(h.env, id))[InvocationStatus.name] };
      });
    }

    it('outcomeStatusOnly (how the API starts it): pending until the outcome, no running step', async () => {
      const seen = await statusDuringAndAfter({ tenantId, agentId: 'a', outcomeStatusOnly: true });
      assert.deepEqual(seen, { during: 'pending', after: 'succeeded' });
    });

    it('without it (runs started before the flag): running while the call is in flight, then the outcome', async () => {
      const seen = await statusDuringAndAfter({ tenantId, agentId: 'a' });
      assert.deepEqual(seen, { during: 'running', after: 'succeeded' });
    });
  });
});
