// The purge steps of PolicyDecisionRetentionWorkflow: each deletes at most `limit` rows (policy
// decisions, captured bodies, A2A task bindings, virtual MCP server sessions) older than the
// cutoff, oldest first, or clears as many never-bound payment bindings' signed payments, and
// answers how many. One bounded statement
// per call, so a large backlog never holds a long transaction or a lock on the whole table;
// the workflow repeats it. Idempotent: a retried call deletes what is still there.
import type { MikroORM } from '@mikro-orm/postgresql';
import { clearUnboundSignedPayments } from '../gateway/payment/binding.ts';

export interface RetentionActivities {
  purgePolicyDecisions(input: { olderThanMs: number; limit: number }): Promise<number>;
  /**
   * Captured bodies (capture_body) older than the cutoff, at most `limit`, oldest first: the
   * body rows go and the invocations that pointed at them keep their digests.
   */
  purgeCapturedBodies(input: { olderThanMs: number; limit: number }): Promise<number>;
  /**
   * A2A task bindings (gateway/a2a/tasks.ts) first seen before the cutoff, at most `limit`,
   * oldest first: a request naming such a task is then refused as naming an unknown one.
   */
  purgeA2aTasks(input: { olderThanMs: number; limit: number }): Promise<number>;
  /**
   * Virtual MCP server sessions (gateway/mcp-servers/sessions.ts) last used before the cutoff,
   * at most `limit`, oldest first: a client then continuing one is told it is unknown (404) and
   * starts a new one. The member sessions it had opened are left to expire at their members.
   */
  purgeMcpServerSessions(input: { olderThanMs: number; limit: number }): Promise<number>;
  /**
   * The payer's signed payment held by payment bindings never bound to a call (gateway/payment/binding.ts
   * clearUnboundSignedPayments) last written before the cutoff, at most `limit`: cleared, the
   * bindings themselves kept (they still refuse the payment's reuse for another call).
   */
  purgeUnboundSignedPayments(input: { olderThanMs: number; limit: number }): Promise<number>;
}

/** Deletes at most `limit` rows of `table` (keyed by `id`) whose `at` is before the cutoff, oldest first; how many. */
async function purgeOldest(
  orm: MikroORM,
  table: 'policy_decisions' | 'mcp_server_sessions',
  at: 'created_at' | 'used_at',
  { olderThanMs, limit }: { olderThanMs: number; limit: number },
): Promise<number> {
  const rows = await orm.em.getConnection().execute<Array<{ deleted: number }>>(
    `with doomed as (
       delete from ${table} where id in (
         select id from ${table} where ${at} < to_timestamp(? / 1000.0) order by ${at} limit ?
       ) returning 1
     ) select count(*)::int as deleted from doomed`,
    [olderThanMs, limit],
  );
  return Number(rows[0]?.deleted ?? 0);
}

export function createRetentionActivities(deps: { orm: MikroORM }): RetentionActivities {
  return {
    purgePolicyDecisions: (input) => purgeOldest(deps.orm, 'policy_decisions', 'created_at', input),
    async purgeCapturedBodies({ olderThanMs, limit }) {
      const rows = await deps.orm.em.getConnection().execute<Array<{ deleted: number }>>(
        `with doomed as (
           select id from bodies where created_at < to_timestamp(? / 1000.0) order by created_at limit ?
         ), unlinked_request as (
           update invocations set request_sha256 = coalesce(request_sha256, (select sha256 from bodies b where b.id = request_body_id)), request_body_id = null
            where request_body_id in (select id from doomed)
         ), unlinked_response as (
           update invocations set response_body_id = null where response_body_id in (select id from doomed)
         ), gone as (
           delete from bodies where id in (select id from doomed) returning 1
         ) select count(*)::int as deleted from gone`,
        [olderThanMs, limit],
      );
      return Number(rows[0]?.deleted ?? 0);
    },
    async purgeA2aTasks({ olderThanMs, limit }) {
      const rows = await deps.orm.em.getConnection().execute<Array<{ deleted: number }>>(
        `with doomed as (
           delete from a2a_tasks where (agent_id, task_id) in (
             select agent_id, task_id from a2a_tasks where created_at < to_timestamp(? / 1000.0) order by created_at limit ?
           ) returning 1
         ) select count(*)::int as deleted from doomed`,
        [olderThanMs, limit],
      );
      return Number(rows[0]?.deleted ?? 0);
    },
    purgeMcpServerSessions: (input) => purgeOldest(deps.orm, 'mcp_server_sessions', 'used_at', input),
    purgeUnboundSignedPayments: (input) => clearUnboundSignedPayments(deps.orm, input),
  };
}
