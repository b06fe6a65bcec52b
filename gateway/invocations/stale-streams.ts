// Fails the streaming rows an API process left `running` when it died mid-call. Each row names
// its owner, the process that wrote it (row-session.ts), and each live process holds its
// owner's advisory lock; a `running` row whose owner's lock is free belongs to a process that
// is gone (or whose row connection broke: see docs/PROXY.md), so nothing will ever complete it.
// It is failed with error_class `gateway_lost`; a metered row is charged 0, its reading none
// (what its meter read died with the process). Every API process sweeps every
// STALE_STREAM_SWEEP_MS; sweeps by several processes at once are harmless (one statement, the
// row's `running` guard).
//
// A paid metered row is also failed `gateway_lost` once it is still running OVERDUE_AFTER_MS past
// its stream_ends_by (metered.ts `streamEndsBy`: when its answer must have ended for its charge
// to be collected), whatever its owner's lock says: its process cuts the answer then and
// completes the row within seconds, so a row still running belongs to a process that is hung,
// or gone while its database session lingers (a half-open connection PostgreSQL has not noticed).
// It is charged what was measured before (persistPartialCharge), never more, and the due-charges
// round settles it at once, before the authorization lapses (temporal/charges-due.ts). A process
// that was alive after all completes the row with its whole charge if the settle has not begun
// (stream-records.ts).
//
// A paid call's row is inserted with its payment binding and no owner; it takes its owner, and
// counts its attempt, in the statement that lets it be forwarded (stream-records.ts,
// markForwarding). A row still without an owner OWNERLESS_AFTER_MS later belongs to a process
// that died (or failed) between the two: it is failed `gateway_lost` too, and since its call
// never reached the upstream (attempts = 0), its payment is released in the same statement,
// so the same payment header buys the call it paid for. A live process whose mark comes after
// the sweep finds its row closed and forwards nothing (the mark's guard), so a payment never
// serves two calls.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from '../../lib/log.ts';
import { releasingPayments } from '../payment/binding.ts';
import { OWNER_LOCK_CLASS } from './row-session.ts';
import { unmeasuredColumns } from './metered.ts';

const STALE_STREAM_SWEEP_MS = 30_000;
/** Far longer than a live process takes from its payment binding to its forwarding mark (one round trip). */
const OWNERLESS_AFTER_MS = 60_000;
/**
 * Far longer than a live process takes to complete a metered row once it cut its answer at
 * stream_ends_by; well inside the two minutes left then before the authorization lapses.
 */
const OVERDUE_AFTER_MS = 30_000;

/**
 * One statement: the owners of `running` streaming rows whose lock can be taken (for the
 * statement only: a transaction-level lock, released as it ends) are gone; their rows fail,
 * and so do owner-less rows older than the bound and metered rows overdue past their
 * stream_ends_by, releasing the payments of the rows whose call was never forwarded, and letting
 * go the payment channels every one of them holds (a process gone with a channel it held between
 * calls lets it go here, not when its lease lapses).
 */
const SWEEP = releasingPayments(
  `update invocations
     set status = 'failed', error_class = 'gateway_lost', updated_at = now(), completed_at = now(),
         ${unmeasuredColumns('gateway_lost')}
   where status = 'running' and mode = 'streaming'
     and (owner in (select owner from gone)
          or (owner is null and created_at < now() - make_interval(secs => ? / 1000.0))
          or stream_ends_by < now() - make_interval(secs => ? / 1000.0))
  returning id, attempts`,
  `owners as (select distinct owner from invocations where status = 'running' and mode = 'streaming' and owner is not null),
  gone as (select owner from owners where pg_try_advisory_xact_lock(?, hashtext(owner)))`,
  true,
);

/**
 * Fails the running streaming rows of owners that are gone, the owner-less ones older than
 * `ownerlessAfterMs` and the metered ones still running `overdueAfterMs` past their
 * stream_ends_by; returns how many.
 */
export async function failStaleStreams(
  orm: MikroORM,
  ownerlessAfterMs = OWNERLESS_AFTER_MS,
  overdueAfterMs = OVERDUE_AFTER_MS,
): Promise<number> {
  const rows = await orm.em
    .getConnection()
    .execute<Array<{ id: string }>>(SWEEP, [OWNER_LOCK_CLASS, ownerlessAfterMs, overdueAfterMs]);
  return rows.length;
}

// Only its own process may say a call was not forwarded whatever its row holds: attempts is
// set back to 0, so the statement releases the payment.
const CLOSE_UNFORWARDED = releasingPayments(
  `update invocations
     set status = 'failed', error_class = 'internal', attempts = 0, updated_at = now(), completed_at = now(),
         ${unmeasuredColumns('not_measured')}
   where id = ? and status = 'running' and mode = 'streaming'
  returning id, attempts`,
);

/**
 * A paid streaming call whose forwarding mark failed or did not answer in time, closed by its
 * own process, which forwarded nothing: failed `internal`, its payment released at once (a mark
 * committed meanwhile changes nothing, the call is not forwarded).
 */
export async function closeUnforwarded(orm: MikroORM, id: string): Promise<void> {
  await orm.em.getConnection().execute(CLOSE_UNFORWARDED, [id]);
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
