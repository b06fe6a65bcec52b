// The one cache a settlement worker's process keeps: what a step hands the next between the
// workflow's activities, and the step results of the fast path's runs (fast-path.ts).
// Its invariants:
// 1. Only a shortcut. An entry saves a step a read of PostgreSQL or the chain; a step that finds
//    none reads them and does the same thing (steps.ts). A crash, a retry on another worker or
//    an eviction costs a read, never correctness.
// 2. A hand-over is taken once, and only within HANDOVER_MS of being left: the next step of a
//    run follows at once, and an older one belongs to a run that stopped (the records may have
//    moved on since). The reservation step still re-reads the record before it uses a
//    handed-over verification, and broadcast only ever sends stored bytes.
// 3. A fast-path run's results are for the same settlement's workflow activities in this
//    process: an activity takes the result of a step the run reached (waiting while the run is
//    at it) instead of running the step again, until FINISHED_TTL_MS after the run ended. The
//    run ran the same steps against the same records, so its result is the step's result.
// 4. One fast-path run per key in this process, until its results expire.
// 5. Bounded: at most MAX_KEYS keys, the least recently used evicted first (lru-cache).
//    Evicting a running run's entry only loses invariant 4's check in memory: the UNIQUE
//    settlement row still gives the settlement to one run.
// 6. Never in a workflow history: it holds signed requests and signed bytes.
import { LRUCache } from 'lru-cache';
import type { Signed } from './signed.ts';
import type { Sent, SettlementSteps, StepRun, Verification } from './steps.ts';
import type { Broadcast, Reserved, SettlementOutcome, Verified } from './types.ts';

const MAX_KEYS = 10_000;
const HANDOVER_MS = 5_000;
/** How long a finished run's step results are kept for the workflow's activities, which come after it. */
const FINISHED_TTL_MS = 60_000;

/** What each step answered, by the step's name (the workflow's order: 1 verify … 4 confirm). */
type StepResults = {
  verify: Verified;
  reserve: Reserved;
  broadcast: Broadcast;
  confirm: SettlementOutcome;
};
type StepName = keyof StepResults;

/** What a step hands the next: step 1's verification, step 2's signed record, step 3's send. */
type Handovers = { verification: Verification; signed: Signed; sent: Sent };

type Deferred<T> = { promise: Promise<T | undefined>; resolve(value: T | undefined): void };
function deferred<T>(): Deferred<T> {
  let resolve!: (value: T | undefined) => void;
  const promise = new Promise<T | undefined>((r) => (resolve = r));
  return { promise, resolve };
}

/** A fast-path run as the cache holds it: each step's result as it comes, and the run's end. */
export type Run = {
  /** Gives a step's result to the activities waiting for it. */
  reached<S extends StepName>(step: S, result: StepResults[S]): void;
  /** The run ended (results not reached resolve undefined); kept for FINISHED_TTL_MS. */
  end(): void;
};

type Entry = {
  handovers: { [K in keyof Handovers]?: { value: Handovers[K]; at: number } };
  run?: { results: { [S in StepName]: Deferred<StepResults[S]> }; done: Promise<void>; active: boolean };
};

export type RunCache = {
  leave<K extends keyof Handovers>(key: string, kind: K, value: Handovers[K]): void;
  take<K extends keyof Handovers>(key: string, kind: K): Handovers[K] | undefined;
  /**
   * Opens a fast-path run for `key`; undefined, once that run has ended, when one is running here
   * or ended within FINISHED_TTL_MS (its results are kept for its activities, not replaced).
   */
  openRun(key: string): Promise<Run | undefined>;
  /** A run's result for a step in this process, waiting for it; undefined when no run here reached the step. */
  resultOf<S extends StepName>(key: string, step: S): Promise<StepResults[S] | undefined>;
};

export function createRunCache(): RunCache {
  const entries = new LRUCache<string, Entry>({ max: MAX_KEYS });
  const entry = (key: string): Entry => {
    let e = entries.get(key);
    if (!e) entries.set(key, (e = { handovers: {} }));
    return e;
  };
  return {
    leave(key, kind, value) {
      entry(key).handovers[kind] = { value, at: Date.now() } as Entry['handovers'][typeof kind];
    },
    take(key, kind) {
      const e = entries.get(key);
      const left = e?.handovers[kind];
      if (!e || !left) return undefined;
      delete e.handovers[kind];
      return Date.now() - left.at <= HANDOVER_MS ? (left.value as Handovers[typeof kind]) : undefined;
    },
    async openRun(key) {
      const current = entries.get(key)?.run;
      if (current) {
        await current.done;
        return undefined;
      }
      let ended!: () => void;
      const run: NonNullable<Entry['run']> = {
        results: { verify: deferred(), reserve: deferred(), broadcast: deferred(), confirm: deferred() },
        done: new Promise<void>((resolve) => (ended = resolve)),
        active: true,
      };
      entry(key).run = run;
      return {
        reached: (step, result) => run.results[step].resolve(result),
        end() {
          run.active = false;
          for (const result of Object.values(run.results)) result.resolve(undefined);
          ended();
          setTimeout(() => {
            const e = entries.get(key);
            if (e?.run === run) delete e.run;
          }, FINISHED_TTL_MS).unref();
        },
      };
    },
    async resultOf(key, step) {
      return entries.get(key)?.run?.results[step].promise;
    },
  };
}

/**
 * The steps as the workflow's activities run them in this process: a fast-path run's result
 * when one reached the step (invariant 3), else the step itself, with the hand-over the
 * previous step left here, if any (invariant 2).
 */
export type CachedSteps = Pick<SettlementSteps, 'watch' | 'nothingSigned' | 'giveUp'> & {
  verify(key: string): Promise<Verified>;
  reserve(key: string): Promise<Reserved>;
  broadcast(key: string): Promise<Broadcast>;
  confirm(key: string, inclusionTimeoutMs: number): Promise<SettlementOutcome>;
};

export function cachedSteps(steps: SettlementSteps, cache: RunCache): CachedSteps {
  /** The step's result; its hand-over left for the next step. A stored request is never NotOwned. */
  function keep<K extends keyof Handovers, R>(key: string, kind: K, run: StepRun<unknown, Handovers[K]>): R {
    if (run.handover) cache.leave(key, kind, run.handover);
    return run.result as R;
  }
  return {
    verify: async (key) => (await cache.resultOf(key, 'verify')) ?? keep(key, 'verification', await steps.verify(key)),
    reserve: async (key) =>
      (await cache.resultOf(key, 'reserve')) ??
      keep(key, 'signed', await steps.reserve(key, cache.take(key, 'verification'))),
    broadcast: async (key) =>
      (await cache.resultOf(key, 'broadcast')) ??
      keep(key, 'sent', await steps.broadcast(key, cache.take(key, 'signed'))),
    confirm: async (key, inclusionTimeoutMs) =>
      (await cache.resultOf(key, 'confirm')) ?? steps.confirm(key, inclusionTimeoutMs, cache.take(key, 'sent')),
    watch: (key, beat) => steps.watch(key, beat),
    nothingSigned: (key) => steps.nothingSigned(key),
    giveUp: (key) => steps.giveUp(key),
  };
}
