// The proxy bench measures how the analytics rollups are maintained, before and after, in the
// same run: the batched fold (migration Migration20261206160000_analytics_fold, the schema as
// migrated) against the row-level triggers it replaced (Migration20261122100100_analytics),
// switched between targets on the bench database. In trigger mode the rows carry no fold stamp
// (no default, no stamping trigger), so the gateway's fold rounds find nothing; in fold mode a
// target's window ends with a fold round (settle), so the window pays for folding every call
// it made, as the triggers' window pays for rolling each one up.
import pg from 'pg';
import { rollupFunction, rollupTriggers } from '../gateway/db/migrations/Migration20261122100100_analytics.ts';
import { stampTrigger } from '../gateway/db/migrations/Migration20261206160000_analytics_fold.ts';

export type AnalyticsModes = {
  /** The row-level rollup triggers, as before the fold. */
  rowTriggers(): Promise<void>;
  /** The batched fold, as migrated. */
  fold(): Promise<void>;
  /** Folds what the window's calls left (the fold's cost inside the window that caused it). */
  settle(): Promise<void>;
  end(): Promise<void>;
};

const DROP_TRIGGERS = [
  'drop trigger if exists invocations_analytics_insert on invocations',
  'drop trigger if exists invocations_analytics_complete on invocations',
];

export async function analyticsModes(databaseUrl: string): Promise<AnalyticsModes> {
  // A connection of the bench database: its work is counted with PostgreSQL's.
  const db = new pg.Client({ connectionString: databaseUrl });
  await db.connect();
  await db.query(rollupFunction);
  let mode: 'fold' | 'rowTriggers' = 'fold';
  const switchTo = async (next: typeof mode, statements: string[]) => {
    if (mode === next) return;
    await db.query('begin');
    for (const sql of statements) await db.query(sql);
    await db.query('commit');
    mode = next;
  };
  return {
    rowTriggers: () =>
      switchTo('rowTriggers', [
        'drop trigger invocations_analytics_stamp on invocations',
        'alter table invocations alter column analytics_xid drop default',
        ...rollupTriggers,
      ]),
    fold: () =>
      switchTo('fold', [
        ...DROP_TRIGGERS,
        'alter table invocations alter column analytics_xid set default pg_current_xact_id()',
        stampTrigger,
      ]),
    async settle() {
      if (mode === 'fold') await db.query('select analytics_fold(true)');
    },
    end: () => db.end(),
  };
}
