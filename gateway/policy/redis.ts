// One Redis connection per process and URL, shared by the policy rate window and the
// analytics limiter. Commands fail fast (bounded timeout, one retry) instead of queueing
// while Redis is away: a policy that needs the rate then applies on_error, and the
// analytics limiter fails open, rather than every call hanging.
import { Redis } from 'ioredis';
import type { Logger } from '../../lib/log.ts';

const clients = new Map<string, Redis>();

export function redisClient(url: string, log?: Logger): Redis {
  let client = clients.get(url);
  if (!client) {
    client = new Redis(url, {
      maxRetriesPerRequest: 1,
      commandTimeout: 500,
      connectTimeout: 2_000,
      enableAutoPipelining: true,
    });
    let lastReport = 0;
    client.on('error', (err: Error) => {
      // ioredis reports every reconnect attempt; one line per 30 s is enough to act on.
      if (Date.now() - lastReport > 30_000) {
        lastReport = Date.now();
        log?.warn({ err: err.message }, 'redis unavailable');
      }
    });
    clients.set(url, client);
  }
  return client;
}

/** Closes the connections opened here for these URLs, or all of them (process shutdown, tests). */
export async function closeRedisClients(urls: string[] = [...clients.keys()]): Promise<void> {
  const closing = urls.flatMap((url) => {
    const client = clients.get(url);
    clients.delete(url);
    return client ? [client] : [];
  });
  await Promise.all(closing.map((c) => c.quit().catch(() => c.disconnect())));
}
