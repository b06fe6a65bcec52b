// The fast path: a /settle handler in the worker's process runs the steps of a fresh request
// itself, at once, instead of waiting for its workflow's start (a server round trip) and first
// task; the workflow is started once the outcome is known. It keeps /settle close to a bare
// settle call. Its invariants:
// 1. It runs only the first request of an authorization (no request stored before, no run here
//    in the last minute); a duplicate or a retry is left to the workflow.
// 2. It works only on what it reserves itself: its request is stored by its reservation
//    statement (or with its refusal), and a settlement another run reserved is left to that run
//    (the steps answer NotOwned for a request not stored yet: steps.ts).
// 3. It runs the same steps as the workflow, in order, each step's hand-over passed straight to
//    the next: nothing is sent that is not stored.
// 4. Each step's result goes to the run cache (run-cache.ts), where the same settlement's
//    workflow activities in this process take it instead of repeating the step.
// 5. Every settlement it reserves gets its workflow: started by the handler once the outcome is
//    known, else by the sweeper (facilitator-service/sweeper.ts).
import type { SettlementRequest } from './request.ts';
import type { Run, RunCache } from './run-cache.ts';
import type { NotOwned, Reads, SettlementSteps } from './steps.ts';
import type { SettlementOutcome } from './types.ts';

export type FastPath = {
  /** Starts a run's reads (nothing is written), so they travel while the handler checks the signature. */
  read(key: string, accountId: string, request: SettlementRequest): Reads;
  /**
   * Runs the steps of a request not stored before; resolves with the outcome as soon as it is
   * known (before the record is written). `stored_before`: a request for the key was stored
   * earlier (or is being run here): nothing done, the workflow decides. Null: another run
   * reserved the settlement, or a step failed; the caller waits for the workflow's outcome.
   */
  run(
    key: string,
    accountId: string,
    request: SettlementRequest,
    inclusionTimeoutMs: number,
    reads?: Reads,
  ): Promise<SettlementOutcome | 'stored_before' | null>;
};

const notOwned = (result: { step: string }): result is NotOwned =>
  result.step === 'stored_before' || result.step === 'elsewhere';

export function createFastPath(steps: SettlementSteps, cache: RunCache): FastPath {
  /** Steps 1 to 4 in order, each result given to the run cache as it comes. */
  async function runSteps(
    key: string,
    run: Run,
    reads: Reads,
    inclusionTimeoutMs: number,
    announce: (outcome: SettlementOutcome) => void,
  ): Promise<SettlementOutcome | NotOwned> {
    const verified = await steps.verify(key, reads);
    if (notOwned(verified.result)) return verified.result;
    run.reached('verify', verified.result);
    if (verified.result.step === 'decided') return verified.result.outcome;
    // A fresh request has no record, so its verification always hands over to the reservation.
    if (!verified.handover) return { step: 'elsewhere' };
    const reserved = await steps.reserve(key, verified.handover);
    if (notOwned(reserved.result)) return reserved.result;
    run.reached('reserve', reserved.result);
    if (reserved.result.step === 'decided') return reserved.result.outcome;
    const sent = await steps.broadcast(key, reserved.handover);
    run.reached('broadcast', sent.result);
    if (sent.result.step === 'decided') return sent.result.outcome;
    const outcome = await steps.confirm(key, inclusionTimeoutMs, sent.handover, announce);
    run.reached('confirm', outcome);
    return outcome;
  }

  return {
    read: (key, accountId, request) => steps.freshReads(key, accountId, request),

    async run(key, accountId, request, inclusionTimeoutMs, reads) {
      // Another request of this authorization is being run here (or was, within the results'
      // lifetime): that run owns the settlement, and this one is answered as a duplicate.
      const run = await cache.openRun(key);
      if (!run) return 'stored_before';
      let announce!: (outcome: SettlementOutcome) => void;
      const announced = new Promise<SettlementOutcome>((resolve) => (announce = resolve));
      const done = runSteps(key, run, reads ?? steps.freshReads(key, accountId, request), inclusionTimeoutMs, announce);
      done.finally(() => run.end()).catch(() => undefined);
      const ended = await Promise.race([announced, done]);
      if ('status' in ended) return ended;
      return ended.step === 'stored_before' ? 'stored_before' : null;
    },
  };
}
