// A background job that runs one round every `everyMs`, the next scheduled only once the round
// before has ended (rounds never overlap), never keeping the process alive. A failed round is
// reported and the next one comes as usual. `everyMs <= 0`: no rounds (the caller runs them).
export type Rounds = { stop(): Promise<void> };

export function runRounds(everyMs: number, round: () => Promise<unknown>, onError: (err: unknown) => void): Rounds {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<unknown> | undefined;
  const schedule = () => {
    if (stopped || everyMs <= 0) return;
    timer = setTimeout(() => {
      current = round().catch(onError);
      void current.finally(schedule);
    }, everyMs);
    timer.unref();
  };
  schedule();
  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await current;
    },
  };
}
