// The purge step of PolicyDecisionRetentionWorkflow: deletes at most `limit` policy decisions
// older than the cutoff, oldest first, and answers how many it deleted. One bounded statement
// per call, so a large backlog never holds a long transaction or a lock on the whole table;
// the workflow repeats it. Idempotent: a retried call deletes what is still there.
import type { MikroORM } from '@mikro-orm/postgresql';

export interface RetentionActivities {
  purgePolicyDecisions(input: { olderThanMs: number; limit: number }): Promise<number>;
}

export function createRetentionActivities(deps: { orm: MikroORM }): RetentionActivities {
  return {
    async purgePolicyDecisions({ olderThanMs, limit }) {
      const rows = await deps.orm.em.getConnection().execute<Array<{ deleted: number }>>(
        `with doomed as (
           delete from policy_decisions where id in (
             select id from policy_decisions where created_at < to_timestamp(? / 1000.0) order by created_at limit ?
           ) returning 1
         ) select count(*)::int as deleted from doomed`,
        [olderThanMs, limit],
      );
      return Number(rows[0]?.deleted ?? 0);
    },
  };
}
