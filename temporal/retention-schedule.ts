// The Temporal Schedule that runs PolicyDecisionRetentionWorkflow (workflows/retention.ts)
// every hour: visible, pausable and triggerable in the Web UI. Created or brought up to the
// configured retention by every gateway worker at start (idempotent); a retention of 0 days
// keeps decisions forever, and the schedule is deleted when nothing is left for it to purge
// (a worker always gives it the unbound signed payments' bound, so only a caller that does not).
import {
  ScheduleAlreadyRunning,
  ScheduleNotFoundError,
  ScheduleOverlapPolicy,
  type Client,
  type ScheduleOptionsAction,
} from '@temporalio/client';
import { z } from 'zod';
import { parseEnv } from '../lib/config.ts';

const RETENTION_SCHEDULE_ID = 'policy-decision-retention';

const RetentionEnv = z.object({
  POLICY_DECISION_RETENTION_DAYS: z.coerce.number().int().min(0).max(36_500).default(30),
  BODY_RETENTION_DAYS: z.coerce.number().int().min(0).max(36_500).default(30),
  A2A_TASK_RETENTION_DAYS: z.coerce.number().int().min(0).max(36_500).default(30),
  MCP_SERVER_SESSION_RETENTION_DAYS: z.coerce.number().int().min(0).max(36_500).default(7),
  // No 0: a signed payment no call holds is never kept forever.
  UNBOUND_PAYMENT_RETENTION_MINUTES: z.coerce.number().int().min(1).max(10_080).default(60),
});

/**
 * POLICY_DECISION_RETENTION_DAYS: days a policy decision is kept; BODY_RETENTION_DAYS: days a
 * captured body (capture_body) is kept; A2A_TASK_RETENTION_DAYS: days an A2A task stays bound
 * to the caller that created it, reachable through the gateway (default 30 each);
 * MCP_SERVER_SESSION_RETENTION_DAYS: days a virtual MCP server session is kept after its last
 * use (default 7). 0 = forever. UNBOUND_PAYMENT_RETENTION_MINUTES: minutes a payment binding
 * never bound to a call keeps the payer's signed payment (default 60; 1 to 10080, never forever).
 */
export function loadRetention(env: NodeJS.ProcessEnv): {
  retentionDays: number;
  bodyRetentionDays: number;
  a2aTaskRetentionDays: number;
  mcpSessionRetentionDays: number;
  unboundPaymentRetentionMinutes: number;
} {
  const e = parseEnv(RetentionEnv, env);
  return {
    retentionDays: e.POLICY_DECISION_RETENTION_DAYS,
    bodyRetentionDays: e.BODY_RETENTION_DAYS,
    a2aTaskRetentionDays: e.A2A_TASK_RETENTION_DAYS,
    mcpSessionRetentionDays: e.MCP_SERVER_SESSION_RETENTION_DAYS,
    unboundPaymentRetentionMinutes: e.UNBOUND_PAYMENT_RETENTION_MINUTES,
  };
}

export type RetentionScheduleOptions = {
  taskQueue: string;
  retentionDays: number;
  bodyRetentionDays?: number;
  a2aTaskRetentionDays?: number;
  mcpSessionRetentionDays?: number;
  unboundPaymentRetentionMinutes?: number;
  scheduleId?: string;
  every?: string;
};

export async function ensureRetentionSchedule(
  client: Client,
  opts: RetentionScheduleOptions,
): Promise<'created' | 'updated' | 'deleted' | 'absent'> {
  const scheduleId = opts.scheduleId ?? RETENTION_SCHEDULE_ID;
  const handle = client.schedule.getHandle(scheduleId);
  if (
    opts.retentionDays === 0 &&
    !opts.bodyRetentionDays &&
    !opts.a2aTaskRetentionDays &&
    !opts.mcpSessionRetentionDays &&
    !opts.unboundPaymentRetentionMinutes
  ) {
    return handle.delete().then(
      () => 'deleted' as const,
      (err: unknown) => {
        if (err instanceof ScheduleNotFoundError) return 'absent' as const;
        throw err;
      },
    );
  }
  const action: ScheduleOptionsAction = {
    type: 'startWorkflow',
    workflowType: 'PolicyDecisionRetentionWorkflow',
    workflowId: `${scheduleId}-run`,
    taskQueue: opts.taskQueue,
    // A policy retention of 0 keeps decisions forever: a cutoff a thousand years back deletes none.
    args: [
      {
        retentionDays: opts.retentionDays || 365_000,
        ...(opts.bodyRetentionDays ? { bodyRetentionDays: opts.bodyRetentionDays } : {}),
        ...(opts.a2aTaskRetentionDays ? { a2aTaskRetentionDays: opts.a2aTaskRetentionDays } : {}),
        ...(opts.mcpSessionRetentionDays ? { mcpSessionRetentionDays: opts.mcpSessionRetentionDays } : {}),
        ...(opts.unboundPaymentRetentionMinutes
          ? { unboundPaymentRetentionMinutes: opts.unboundPaymentRetentionMinutes }
          : {}),
      },
    ],
  };
  const spec = { intervals: [{ every: (opts.every ?? '1 hour') as '1 hour' }] };
  // A purge still running when the next is due makes the next one unnecessary.
  const policies = { overlap: ScheduleOverlapPolicy.SKIP, catchupWindow: '10 minutes' } as const;
  try {
    await client.schedule.create({
      scheduleId,
      spec,
      action,
      policies,
      memo: { purpose: 'policy decision retention' },
    });
    return 'created';
  } catch (err) {
    if (!(err instanceof ScheduleAlreadyRunning)) throw err;
    await handle.update((previous) => ({ ...previous, spec, action, policies: { ...previous.policies, ...policies } }));
    return 'updated';
  }
}
