// Waiting for a settlement's outcome without waiting for its workflow to close: the record
// gets its outcome (settled, failed, pending) in a statement that also NOTIFYs it, and the
// /settle handler listening for its key answers from the announcement at once. The workflow's
// own result stays the fallback (and the only source for answers without a record: guardrail
// refusals), so a lost notification only costs latency. One LISTEN connection per process.
import pg from 'pg';
import type { Logger } from '../lib/log.ts';
import { OUTCOME_CHANNEL, type AnnouncedOutcome } from './store/records.ts';

type OutcomeWaiter = { promise: Promise<AnnouncedOutcome>; cancel(): void };

export type OutcomeListener = {
  /** Resolves when `key`'s outcome is announced; register before the work that may announce it starts. */
  waitFor(key: string): OutcomeWaiter;
  close(): Promise<void>;
};

export async function createOutcomeListener(databaseUrl: string, log: Logger): Promise<OutcomeListener> {
  const waiters = new Map<string, Set<(outcome: AnnouncedOutcome) => void>>();
  let client: pg.Client | undefined;
  let closed = false;

  const connect = async (): Promise<void> => {
    if (closed) return;
    const next = new pg.Client({ connectionString: databaseUrl });
    next.on('notification', (message) => {
      if (message.channel !== OUTCOME_CHANNEL || !message.payload) return;
      let outcome: AnnouncedOutcome;
      try {
        outcome = JSON.parse(message.payload) as AnnouncedOutcome;
      } catch {
        return;
      }
      for (const wake of waiters.get(outcome.key) ?? []) wake(outcome);
    });
    next.on('error', (err) => {
      log.warn({ err: err.message }, 'outcome listener lost its connection; reconnecting');
      client = undefined;
      void next.end().catch(() => undefined);
      setTimeout(() => void connect().catch(() => undefined), 1_000);
    });
    try {
      await next.connect();
      await next.query(`listen ${OUTCOME_CHANNEL}`);
      client = next;
    } catch (err) {
      log.warn({ err: (err as Error).message }, 'outcome listener could not connect; retrying');
      void next.end().catch(() => undefined);
      setTimeout(() => void connect().catch(() => undefined), 1_000);
    }
  };
  await connect();

  return {
    waitFor(key) {
      let wake!: (outcome: AnnouncedOutcome) => void;
      const promise = new Promise<AnnouncedOutcome>((resolve) => {
        wake = resolve;
      });
      const set = waiters.get(key) ?? new Set();
      set.add(wake);
      waiters.set(key, set);
      return {
        promise,
        cancel() {
          set.delete(wake);
          if (set.size === 0) waiters.delete(key);
        },
      };
    },
    async close() {
      closed = true;
      waiters.clear();
      await client?.end().catch(() => undefined);
    },
  };
}
