// Keeps the percentile summaries of closed hours and days current in the background, so a
// read of a month nobody has read yet finds them (query.ts would otherwise compute every one
// from its histograms while the caller waits: 650-850 ms for a million invocations). Every few
// minutes the SQL function analytics_summarize (migration
// Migration20261128040000_analytics_rebuild_summaries) summarizes the hours closed in the last
// two days, and their days, that a read has not summarized yet; one process at a time does it
// (the function takes an advisory lock), and a late completion into a summarized hour makes
// that summary stale again, for the next round or read. The current hour and day stay with the
// reader: their counts move with every completed call.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from '../../lib/log.ts';
import { runRounds, type Rounds } from '../../lib/rounds.ts';

const SUMMARIZE_EVERY_MS = 5 * 60_000;
/** How far back a round looks: a process down for a while catches up on its first round. */
const LOOKBACK_MS = 2 * 86_400_000;
const HOUR_MS = 3600_000;

/** One round: summarizes the closed hours (and days) of the look-back window; answers how many hours. */
export async function summarizeClosedBuckets(orm: MikroORM, now = Date.now()): Promise<number> {
  const until = Math.floor(now / HOUR_MS) * HOUR_MS;
  const [row] = await orm.em
    .getConnection()
    .execute<Array<{ hours: string }>>(`select analytics_summarize(?::timestamptz, ?::timestamptz) as hours`, [
      new Date(until - LOOKBACK_MS).toISOString(),
      new Date(until).toISOString(),
    ]);
  return Number(row?.hours ?? 0);
}

export function summarizeInBackground(orm: MikroORM, log: Logger, everyMs = SUMMARIZE_EVERY_MS): Rounds {
  return runRounds(
    everyMs,
    () => summarizeClosedBuckets(orm),
    (err) => log.warn({ err: (err as Error).message }, 'analytics summaries round failed'),
  );
}
