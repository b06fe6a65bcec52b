// Folds new and changed invocation rows into the analytics rollups, in batches, off the calls'
// path: every ANALYTICS_FOLD_EVERY_MS each API process calls the SQL function analytics_fold
// (migration Migration20261206160000_analytics_fold), which folds, in one statement, every row
// version committed since the last round's snapshot and stores the new snapshot with them. One
// round at a time across replicas (an advisory lock: a process finding it taken skips its
// turn), so nothing is counted twice; a round that fails or dies folds nothing, and the next
// one takes its rows. After each try the process reads how far the rollups are behind, for
// gateway_analytics_fold_lag_seconds on /metrics.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from '../../lib/log.ts';
import { runRounds, type Rounds } from '../../lib/rounds.ts';
import { recordFold } from '../metrics.ts';

const FOLD = `select analytics_fold(?) as rows`;
// Read after the round, in a statement of its own: the round's own statement sees the state as it was before.
const LAG = `select extract(epoch from clock_timestamp() - folded_at) as lag from analytics_fold_state`;

/**
 * One round: the rows folded, or null when another process's round held the lock. `wait`:
 * wait for that round instead, then fold (for callers that need the rollups caught up with
 * what they committed, e.g. tests: every change committed before the call is folded by its end).
 */
export async function foldRound(orm: MikroORM, wait = false): Promise<number | null> {
  const connection = orm.em.getConnection();
  const [folded] = await connection.execute<Array<{ rows: string | null }>>(FOLD, [wait]);
  const rows = folded.rows === null ? null : Number(folded.rows);
  const [state] = await connection.execute<Array<{ lag: string }>>(LAG, []);
  recordFold(Number(state.lag), rows);
  return rows;
}

export function foldInBackground(orm: MikroORM, log: Logger, everyMs: number): Rounds {
  return runRounds(
    everyMs,
    () => foldRound(orm),
    (err) => log.warn({ err: (err as Error).message }, 'analytics fold round failed'),
  );
}
