// The channel charges this process is committing, by channel id: a payer's next call on the
// channel, arriving here while its previous call's charge is still being committed (the client
// reads the answer's end before the commit lets the channel go), waits for that commit instead
// of polling the lease on a backoff. Other processes' commits are still found by polling.
const committing = new Map<string, Promise<unknown>>();

/** Notes that `commit` lets `channelId` go when it settles (either way). */
export function noteChannelCommit(channelId: string, commit: Promise<unknown>): void {
  const settled = commit.then(
    () => undefined,
    () => undefined,
  );
  committing.set(channelId, settled);
  void settled.then(() => {
    if (committing.get(channelId) === settled) committing.delete(channelId);
  });
}

/** Resolves when this process's commit on the channel settles, or after `ms`, whichever is first. */
export function channelCommitOrTimeout(channelId: string, ms: number): Promise<void> {
  const pending = committing.get(channelId);
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)));
  if (!pending) return timeout;
  return Promise.race([pending.then(() => undefined), timeout]).finally(() => clearTimeout(timer));
}
