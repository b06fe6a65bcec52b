// How a writer learns that its committed change is in force on every replica (ChangeFeed.publish):
// it sends a sync token on the channel and waits for the acknowledgement of each replica holding
// a lease. A replica acknowledges once the token reaches it, i.e. once it has applied every
// notification committed before it (PostgreSQL delivers them in commit order); one that does not
// is waited out until its lease ends, by when it no longer answers from memory.
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FeedConnection } from './feed-connection.ts';
import { LEASED_REPLICAS } from './feed-lease.ts';

export type FeedAcks = {
  /** Handles a `sync:` or `ack:` payload (answering a sync with `acknowledge`); false for any other. */
  receive(payload: string, acknowledge: (ack: string) => void): boolean;
  publish(): Promise<void>;
};

export function createFeedAcks(opts: {
  channel: string;
  replicaId: string;
  leaseMs: number;
  connection: Pick<FeedConnection, 'run'>;
}): FeedAcks {
  const { channel, replicaId, leaseMs, connection } = opts;
  // Acknowledgements awaited, by sync token, then by replica id.
  const awaiting = new Map<string, Map<string, () => void>>();

  function receive(payload: string, acknowledge: (ack: string) => void): boolean {
    if (payload.startsWith('sync:')) {
      // Every notification committed before the token has been applied (they arrive in commit
      // order and are applied as they arrive): say so.
      acknowledge(`ack:${payload.slice(5)}:${replicaId}`);
      return true;
    }
    if (payload.startsWith('ack:')) {
      const [, token, replica] = payload.split(':');
      awaiting.get(token)?.get(replica)?.();
      return true;
    }
    return false;
  }

  async function publish(): Promise<void> {
    const token = randomUUID();
    let replicas: Array<{ replica_id: string; remaining_ms: number }>;
    try {
      replicas = await connection.run(LEASED_REPLICAS, []);
    } catch {
      // The write is committed; who holds a lease is unknown: every lease taken so far ends
      // within leaseMs, and one renewed after the commit applied the change first.
      await sleep(leaseMs + 50);
      return;
    }
    if (replicas.length === 0) return;
    const pending = new Map<string, () => void>();
    awaiting.set(token, pending);
    const waits = replicas.map(
      (r) =>
        new Promise<void>((resolve) => {
          // Not acknowledged (or the acknowledgement not heard here): by the lease's end it no
          // longer answers from memory unless it renewed, and a renewal applies the change first.
          const timer = setTimeout(resolve, Math.max(0, r.remaining_ms) + 50);
          pending.set(r.replica_id, () => {
            clearTimeout(timer);
            resolve();
          });
        }),
    );
    try {
      // Not sent: nobody acknowledges, and each lease is waited out instead.
      await connection.run('select pg_notify($1, $2)', [channel, `sync:${token}`]).catch(() => undefined);
      await Promise.all(waits);
    } finally {
      awaiting.delete(token);
    }
  }

  return { receive, publish };
}
