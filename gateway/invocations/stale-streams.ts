// Fails the streaming rows an API process left `running` when it died mid-call. Each row names
// its owner, the process that wrote it (row-session.ts), and each live process holds its
// owner's advisory lock; a `running` row whose owner's lock is free belongs to a process that
// is gone (or whose row connection broke: see docs/PROXY.md), so nothing will ever complete it.
// It is failed with error_class `gateway_lost`. Every API process sweeps every
// STALE_STREAM_SWEEP_MS; sweeps by several processes at once are harmless (one statement, the
// row's `running` guard).
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from '../../lib/log.ts';
import { OWNER_LOCK_CLASS } from './row-session.ts';

const STALE_STREAM_SWEEP_MS = 30_000;

/**
 * One statement: the owners of `running` streaming rows whose lock can be taken (for the
 * statement only: a transaction-level lock, released as it ends) are gone; their rows fail.
 */
const SWEEP = `
  with owners as (select distinct owner from invocations where status = 'running' and mode = 'streaming' and owner is not null),
  gone as (select owner from owners where pg_try_advisory_xact_lock(?, hashtext(owner)))
  update invocations
     set status = 'failed', error_class = 'gateway_lost', updated_at = now(), completed_at = now()
   where status = 'running' and mode = 'streaming' and owner in (select owner from gone)
  returning id`;

/** Fails the running streaming rows of owners that are gone; returns how many. */
export async function failStaleStreams(orm: MikroORM): Promise<number> {
  const rows = await orm.em.getConnection().execute<Array<{ id: string }>>(SWEEP, [OWNER_LOCK_CLASS]);
  return rows.length;
}

/** Sweeps every `everyMs` (never keeps the process alive). */
export function scheduleStaleStreamSweep(orm: MikroORM, log: Logger, everyMs = STALE_STREAM_SWEEP_MS): () => void {
  const timer = setInterval(() => {
    failStaleStreams(orm).then(
      (failed) => {
        if (failed) log.warn({ failed }, 'failed streaming invocations left running by a lost API process');
      },
      (err: Error) => log.warn({ err: err.message }, 'stale stream sweep failed'),
    );
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}
