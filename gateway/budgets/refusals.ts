// A call a hard budget refused, recorded as an invocation: `failed`, error class
// `budget_exceeded`, naming the budget (`budget_id`), no attempt and no payment (it was refused
// before either), so `GET /v1/invocations?budget_id=` lists a budget's refusals and analytics
// counts them by class. Written off the refusal's path (the 429 does not wait for it), at most
// MAX_WRITING at once per process: past that, refusals are only counted by the metric, so a flood
// of refused calls cannot queue the database behind it.
import pLimit from 'p-limit';
import { InvocationSchema, type Invocation } from '../db/entities.ts';
import type { GatewayDb } from '../db/orm.ts';

const MAX_WRITING = 32;

/** What the refusal's row says of the call: its admission facts (the rest is the refusal's). */
export type RefusedCall = Pick<
  Invocation,
  | 'id'
  | 'tenantId'
  | 'agentId'
  | 'mode'
  | 'requestId'
  | 'caller'
  | 'callerKind'
  | 'model'
  | 'contentType'
  | 'requestBytes'
  | 'mcpMethod'
  | 'mcpTool'
  | 'mcpServerId'
  | 'a2aMethod'
  | 'a2aSkill'
  | 'a2aTaskId'
  | 'a2aContextId'
>;

export type RefusalRecorder = { record(call: RefusedCall, budgetId: string): void };

export function createRefusalRecorder(db: GatewayDb, onError: (err: Error) => void): RefusalRecorder {
  const writing = pLimit(MAX_WRITING);
  return {
    record(call, budgetId) {
      if (writing.activeCount + writing.pendingCount >= MAX_WRITING) return;
      const now = new Date();
      void writing(() =>
        db.em.fork().insert(InvocationSchema, {
          ...call,
          status: 'failed',
          errorClass: 'budget_exceeded',
          budgetId,
          attempts: 0,
          requestHeaders: {},
          createdAt: now,
          updatedAt: now,
          completedAt: now,
        } as Invocation),
      ).catch((err: Error) => onError(err));
    },
  };
}
