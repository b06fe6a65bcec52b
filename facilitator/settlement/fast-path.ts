// The fast path: a /settle handler in the worker's process runs the steps of a fresh request
// itself, at once, instead of waiting for its workflow's start (a server round trip) and first
// task; the workflow is started once the outcome is known. It keeps /settle close to a bare
// settle call. Its invariants:
// 1. It runs only the first request of an authorization (no claim check stored before, no run
//    here in the last minute); a duplicate or a retry is left to the workflow.
// 2. It works only on what it claims itself: its claim check is stored by its claim statement
//    (or with its refusal), and a settlement another run claimed is left to that run.
// 3. It runs the same steps as the workflow (steps.ts): nothing is sent that is not stored.
// 4. One run per key in this process. The workflow's step activities in this process take each
//    step's result from the run (waiting for it if the run is still at that step) instead of
//    repeating it, and run a step themselves only when no run here reached it.
// 5. Every settlement it claims gets its workflow: started by the handler once the outcome is
//    known, else by the sweeper (facilitator-service/sweeper.ts).
import type { SettleRequest } from '../../x402/schemas.ts';
import type { NotOwned, Reads, SettlementSteps } from './steps.ts';
import type { Broadcast, Claimed, SettlementOutcome, Verified } from './types.ts';

/** What each step of a run answered, by step name (the names of the workflow's steps). */
export type StepResults = {
  verify: Verified;
  claim: Claimed;
  broadcast: Broadcast;
  confirm: SettlementOutcome;
};
export type StepName = keyof StepResults;

export type FastPath = {
  /** Starts a run's reads (nothing is written), so they travel while the handler checks the signature. */
  read(key: string, accountId: string, request: SettleRequest): Reads;
  /**
   * Runs the steps of a request not stored before; resolves with the outcome as soon as it is
   * known (before the record is written). `stored_before`: a request for the key was stored
   * earlier (or is being run here): nothing done, the workflow decides. Null: another run
   * claimed the settlement, or a step failed; the caller waits for the workflow's outcome.
   */
  run(
    key: string,
    accountId: string,
    request: SettleRequest,
    inclusionTimeoutMs: number,
    reads?: Reads,
  ): Promise<SettlementOutcome | 'stored_before' | null>;
  /** A run's result for a step in this process, waiting for it; undefined when no run here reached the step. */
  resultOf<S extends StepName>(key: string, step: S): Promise<StepResults[S] | undefined>;
};

/** How long a finished run's step results are kept for the workflow's activities, which come after it. */
const FINISHED_TTL_MS = 60_000;
const MAX_FINISHED = 10_000;

type Deferred<T> = { promise: Promise<T | undefined>; resolve(value: T | undefined): void };
function deferred<T>(): Deferred<T> {
  let resolve!: (value: T | undefined) => void;
  const promise = new Promise<T | undefined>((r) => (resolve = r));
  return { promise, resolve };
}

/** One run: each step's result (undefined once the run ended without reaching it), and its end. */
type Run = { results: { [S in StepName]: Deferred<StepResults[S]> }; done: Promise<unknown>; active: boolean };

export function createFastPath(steps: SettlementSteps): FastPath {
  const runs = new Map<string, Run>();

  function open(key: string): Run {
    const run: Run = {
      results: { verify: deferred(), claim: deferred(), broadcast: deferred(), confirm: deferred() },
      done: Promise.resolve(),
      active: true,
    };
    // Past the cap, the oldest finished runs go first (their activities most likely came long ago).
    for (const [k, r] of runs) {
      if (runs.size < MAX_FINISHED) break;
      if (!r.active) runs.delete(k);
    }
    runs.set(key, run);
    return run;
  }

  function close(key: string, run: Run): void {
    run.active = false;
    steps.forget(key);
    for (const result of Object.values(run.results)) result.resolve(undefined);
    setTimeout(() => runs.get(key) === run && runs.delete(key), FINISHED_TTL_MS).unref();
  }

  /** The steps in order, each result recorded for the workflow's activities as it comes. */
  async function runSteps(
    key: string,
    run: Run,
    reads: Reads,
    inclusionTimeoutMs: number,
    announce: (outcome: SettlementOutcome) => void,
  ): Promise<SettlementOutcome | NotOwned> {
    const verified = await steps.verifyOwn(key, reads);
    if (verified.step === 'stored_before' || verified.step === 'elsewhere') return verified;
    run.results.verify.resolve(verified);
    if (verified.step === 'decided') return verified.outcome;
    // A fresh request has no record, so its verification is never 'signed': the claim follows.
    const claimed = await steps.claimOwn(key);
    if (claimed.step === 'stored_before' || claimed.step === 'elsewhere') return claimed;
    run.results.claim.resolve(claimed);
    if (claimed.step === 'decided') return claimed.outcome;
    const sent = await steps.broadcast(key);
    run.results.broadcast.resolve(sent);
    if (sent.step === 'decided') return sent.outcome;
    const outcome = await steps.confirm(key, inclusionTimeoutMs, announce);
    run.results.confirm.resolve(outcome);
    return outcome;
  }

  return {
    read: (key, accountId, request) => steps.freshReads(key, accountId, request),

    async run(key, accountId, request, inclusionTimeoutMs, reads) {
      // Another request of this authorization is being run here: it owns the settlement, and
      // this one is answered as a duplicate once that run's request is stored.
      // A run that ended here recently keeps its step results for the workflow's activities: a
      // later request (a retry, another account) is not a fresh one and leaves them alone.
      const current = runs.get(key);
      if (current) {
        await current.done.catch(() => undefined);
        return 'stored_before';
      }
      const run = open(key);
      let announce!: (outcome: SettlementOutcome) => void;
      const announced = new Promise<SettlementOutcome>((resolve) => (announce = resolve));
      const done = runSteps(key, run, reads ?? steps.freshReads(key, accountId, request), inclusionTimeoutMs, announce);
      run.done = done.finally(() => close(key, run));
      run.done.catch(() => undefined);
      const ended = await Promise.race([announced, done]);
      if ('status' in ended) return ended;
      return ended.step === 'stored_before' ? 'stored_before' : null;
    },

    async resultOf(key, step) {
      return runs.get(key)?.results[step].promise;
    },
  };
}
