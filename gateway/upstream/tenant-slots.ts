// How many requests one tenant may have open to one upstream origin at a time. The connection
// pool to an origin is shared by every tenant whose agents use it; without a per-tenant bound,
// one tenant holding many slow calls to a popular origin would take every connection and make
// the other tenants' calls wait behind its own. A call over its tenant's bound waits for one of
// that tenant's own calls to finish (within its deadline), never for another tenant's.
export class TenantSlots {
  private readonly held = new Map<string, number>();
  private readonly waiting = new Map<string, Array<() => void>>();
  private readonly perKey: number;
  constructor(perKey: number) {
    this.perKey = perKey;
  }

  /** Resolves with the release of a slot; rejects with `signal`'s reason if it aborts first. */
  acquire(key: string, signal?: AbortSignal): Promise<() => void> {
    if ((this.held.get(key) ?? 0) < this.perKey) return Promise.resolve(this.take(key));
    return new Promise((resolve, reject) => {
      const queue = this.waiting.get(key) ?? [];
      this.waiting.set(key, queue);
      const grant = () => {
        signal?.removeEventListener('abort', onAbort);
        resolve(this.take(key));
      };
      const onAbort = () => {
        const i = queue.indexOf(grant);
        if (i >= 0) queue.splice(i, 1);
        if (queue.length === 0) this.waiting.delete(key);
        reject(signal!.reason);
      };
      if (signal?.aborted) return reject(signal.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      queue.push(grant);
    });
  }

  /** A slot at once, or null when the key is at its bound. */
  tryAcquire(key: string): (() => void) | null {
    return (this.held.get(key) ?? 0) < this.perKey ? this.take(key) : null;
  }

  /** Open requests of `key` now (for tests and metrics). */
  inUse(key: string): number {
    return this.held.get(key) ?? 0;
  }

  private take(key: string): () => void {
    this.held.set(key, (this.held.get(key) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiting.get(key)?.shift();
      if (this.waiting.get(key)?.length === 0) this.waiting.delete(key);
      const left = (this.held.get(key) ?? 1) - 1;
      if (left > 0) this.held.set(key, left);
      else this.held.delete(key);
      next?.();
    };
  }
}
