// Invocation figures per caller (docs/ANALYTICS.md "Per caller"): who called, in which bucket,
// how often, how often in error. Beside the per-agent rollups (query.ts), read from the
// invocation rows themselves (the rollups hold no caller), so it answers counts and error
// classes only, no percentiles, and at most MAX_GROUPS groups. A public agent's payers are
// callers like any token's user: `x402:<address>` with caller_kind `x402`.
import type { MikroORM } from '@mikro-orm/postgresql';

export type CallerQuery = {
  bucket: 'hour' | 'day';
  since: Date;
  until: Date;
  agentId?: string;
  callerKind?: 'token' | 'x402';
};

export type CallerGroup = {
  user_id: string;
  caller_kind: 'token' | 'x402';
  agent_id: string;
  bucket_start: string;
  count: number;
  error_rate: number;
  by_error_class: Record<string, number>;
};

/** Groups answered at most; `truncated` says when there were more. */
export const MAX_CALLER_GROUPS = 1000;

const HOUR = 3600_000;
const DAY = 24 * HOUR;
const LAST_INSTANT = Date.parse('9999-12-31T23:59:59.999Z');

export function createCallerAnalyticsReader(orm: MikroORM) {
  return {
    async query(tenantId: string, q: CallerQuery): Promise<{ groups: CallerGroup[]; truncated: boolean }> {
      // Whole buckets, as the per-agent figures: the window widened at both ends.
      const size = q.bucket === 'hour' ? HOUR : DAY;
      const from = Math.floor(q.since.getTime() / size) * size;
      const to = Math.min(Math.floor(q.until.getTime() / size) * size + size, LAST_INSTANT);
      const filters: string[] = [];
      const params: unknown[] = [q.bucket, tenantId, new Date(from).toISOString(), new Date(to).toISOString()];
      if (q.agentId !== undefined) {
        filters.push('and agent_id = ?');
        params.push(q.agentId);
      }
      if (q.callerKind !== undefined) {
        filters.push('and caller_kind = ?');
        params.push(q.callerKind);
      }
      const rows = await orm.em.getConnection().execute<Array<Record<string, any>>>(
        `with g as (
           select caller, caller_kind, agent_id, date_trunc(?, created_at, 'UTC') as b,
                  case when status = 'failed' or error_class is not null then coalesce(error_class, 'unknown') end as class,
                  count(*) as n
           from invocations
           where tenant_id = ? and created_at >= ?::timestamptz and created_at < ?::timestamptz
             and status in ('succeeded', 'failed') ${filters.join(' ')}
           group by 1, 2, 3, 4, 5)
         select caller, caller_kind, agent_id, (extract(epoch from b) * 1000)::bigint as start_ms,
                sum(n)::bigint as count, coalesce(sum(n) filter (where class is not null), 0)::bigint as errors,
                coalesce(jsonb_object_agg(class, n) filter (where class is not null), '{}'::jsonb) as by_error_class
         from g group by caller, caller_kind, agent_id, b
         order by b, caller collate "C", agent_id collate "C"
         limit ${MAX_CALLER_GROUPS + 1}`,
        params,
      );
      const groups = rows.slice(0, MAX_CALLER_GROUPS).map((row) => {
        const count = Number(row.count);
        return {
          user_id: row.caller as string,
          caller_kind: row.caller_kind as 'token' | 'x402',
          agent_id: row.agent_id as string,
          bucket_start: new Date(Number(row.start_ms)).toISOString(),
          count,
          error_rate: count === 0 ? 0 : Number(row.errors) / count,
          by_error_class: Object.fromEntries(
            Object.entries(row.by_error_class as Record<string, unknown>).map(([k, v]) => [k, Number(v)]),
          ),
        };
      });
      return { groups, truncated: rows.length > MAX_CALLER_GROUPS };
    },
  };
}
