// The per-process caches of the proxy gate (agents, tenant policies) across replicas: more API
// instances with their own ORM and their own change feed (as separate processes would have) on
// the same database. A change made through one instance is in force for another instance's
// next call (the writer waits for every leased replica's acknowledgement, or for its lease to
// run out); one made straight in the database is in force on the next call of a `strict`
// instance and within moments on the others; a feed that loses its subscription stops
// answering from memory until it is back.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import type { MikroORM } from '@mikro-orm/postgresql';
import { request } from 'undici';
import { SignJWT } from 'jose';
import { stack } from '../support/stack.ts';
import { call, callAt } from '../support/http.ts';
import { createAgent, rawUpstream, readAll, type RawUpstream } from '../support/proxy-helpers.ts';
import { waitFor } from '../support/wait.ts';
import { startGateway } from '../../api/wiring.ts';
import { createLogger } from '../../lib/log.ts';
import { openOrm } from '../../gateway/db/orm.ts';
import { createChangeFeed, openChangeFeed, type ChangeFeed } from '../../gateway/db/change-feed.ts';
import { createFeedCache } from '../../gateway/db/feed-cache.ts';

async function streamAt(base: string, token: string, agentId: string): Promise<number> {
  const res = await request(`${base}/v1/proxy/${agentId}/stream`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}` },
    body: 'x',
  });
  await res.body.dump();
  return res.statusCode;
}

describe('gate caches across replicas (LISTEN/NOTIFY)', () => {
  let up: RawUpstream;
  let replicaOrm: MikroORM;
  let replicaFeed: ChangeFeed;
  let replicaServer: Server;
  let replica: string;
  let strictOrm: MikroORM;
  let strictFeed: ChangeFeed;
  let strictServer: Server;
  let strictReplica: string;
  let token: string;

  before(async () => {
    up = await rawUpstream((req, res) => void readAll(req).then(() => res.end('ok')));
    replicaOrm = await openOrm(stack().config.databaseUrl, { poolMax: 4 });
    replicaFeed = openChangeFeed(replicaOrm);
    replicaServer = await startGateway(
      { ...stack().config, port: 0 },
      replicaOrm,
      stack().temporal,
      createLogger('replica', 'silent'),
      { feed: replicaFeed },
    );
    replica = `http://127.0.0.1:${(replicaServer.address() as AddressInfo).port}`;
    strictOrm = await openOrm(stack().config.databaseUrl, { poolMax: 4 });
    strictFeed = openChangeFeed(strictOrm);
    strictServer = await startGateway(
      { ...stack().config, port: 0, gateFreshness: 'strict' },
      strictOrm,
      stack().temporal,
      createLogger('strict', 'silent'),
      { feed: strictFeed },
    );
    strictReplica = `http://127.0.0.1:${(strictServer.address() as AddressInfo).port}`;
    token = await stack().token(`tenant-cache-${randomUUID()}`);
    await waitFor(() => replicaFeed.live() && strictFeed.live() && stack().feed.live());
  });

  after(async () => {
    for (const server of [replicaServer, strictServer]) {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
    // Each replica's feed closes with its ORM.
    for (const orm of [replicaOrm, strictOrm]) await orm.close();
    await up.close();
  });

  for (const [what, deactivate] of [
    ['suspension', (id: string) => call('POST', `/v1/agents/${id}/suspend`, { token, json: { reason: 'test' } })],
    ['deletion', (id: string) => call('DELETE', `/v1/agents/${id}`, { token })],
  ] as const) {
    it(`refuses the other instance's next call after a ${what} made through this one`, async () => {
      const agentId = await createAgent(token, { upstream_url: up.url });
      // The replica has the agent cached (two calls: the second is answered from memory).
      assert.equal(await streamAt(replica, token, agentId), 200);
      assert.equal(await streamAt(replica, token, agentId), 200);
      const res = await deactivate(agentId);
      assert.ok(res.status === 200 || res.status === 204, res.text);
      assert.equal(await streamAt(replica, token, agentId), 422);
    });
  }

  it('strict: takes an upstream change made straight in the database on the next call', async () => {
    const other = await rawUpstream((req, res) => void readAll(req).then(() => res.end('other')));
    try {
      const agentId = await createAgent(token, { upstream_url: up.url });
      assert.equal(await streamAt(strictReplica, token, agentId), 200);
      assert.equal(await streamAt(strictReplica, token, agentId), 200);
      const before = other.hits.length;
      await stack()
        .orm.em.getConnection()
        .execute('update agents set upstream_url = ? where id = ?', [other.url, agentId]);
      assert.equal(await streamAt(strictReplica, token, agentId), 200);
      assert.equal(other.hits.length, before + 1, 'the call went to the new upstream');
    } finally {
      await other.close();
    }
  });

  it('acknowledged: takes an upstream change made straight in the database as its notification arrives', async () => {
    const other = await rawUpstream((req, res) => void readAll(req).then(() => res.end('other')));
    try {
      const agentId = await createAgent(token, { upstream_url: up.url });
      assert.equal(await streamAt(replica, token, agentId), 200);
      assert.equal(await streamAt(replica, token, agentId), 200);
      await stack()
        .orm.em.getConnection()
        .execute('update agents set upstream_url = ? where id = ?', [other.url, agentId]);
      await waitFor(
        async () => {
          assert.equal(await streamAt(replica, token, agentId), 200);
          return other.hits.length > 0;
        },
        { timeoutMs: 2_000, everyMs: 0, what: 'the replica to call the new upstream after the change' },
      );
    } finally {
      await other.close();
    }
  });

  it('a write through the API waits for a leased replica that does not acknowledge, until its lease has run out', async () => {
    const agentId = await createAgent(token, { upstream_url: up.url });
    const conn = stack().orm.em.getConnection();
    // A replica that holds a lease and hears nothing (a process stalled, or one that died with
    // its lease still running): the writer cannot know it applied the change.
    const silent = `rep_silent-${randomUUID()}`;
    await conn.execute(
      `insert into gateway_cache_replicas (replica_id, lease_until) values (?, clock_timestamp() + interval '1500 milliseconds')`,
      [silent],
    );
    try {
      const [held] = await conn.execute<Array<{ leased: boolean }>>(
        'select lease_until > clock_timestamp() as leased from gateway_cache_replicas where replica_id = ?',
        [silent],
      );
      assert.equal(held.leased, true);
      const res = await call('POST', `/v1/agents/${agentId}/suspend`, { token, json: { reason: 'test' } });
      assert.equal(res.status, 200, res.text);
      // By the database's clock (the one the lease is kept on), the answer came after the lease ended.
      const [after] = await conn.execute<Array<{ ended: boolean }>>(
        'select lease_until <= clock_timestamp() as ended from gateway_cache_replicas where replica_id = ?',
        [silent],
      );
      assert.equal(after.ended, true, 'the suspension answered while the silent replica still held its lease');
      // Every live replica acknowledges: no such wait. The answer comes before any lease it could
      // have waited out instead would have ended.
      const [leases] = await conn.execute<Array<{ first_end: string }>>(
        'select min(lease_until)::text as first_end from gateway_cache_replicas where lease_until > clock_timestamp()',
      );
      assert.equal((await call('POST', `/v1/agents/${agentId}/unsuspend`, { token, json: {} })).status, 200);
      const [quick] = await conn.execute<Array<{ before: boolean }>>(
        'select clock_timestamp() < ?::timestamptz as before',
        [leases.first_end],
      );
      assert.equal(quick.before, true, 'the unsuspension waited for a lease to run out');
    } finally {
      await conn.execute('delete from gateway_cache_replicas where replica_id = ?', [silent]);
    }
  });

  it('applies a policy replaced through one instance to the other instance’s next call', async () => {
    const agentId = await createAgent(token, { upstream_url: up.url });
    assert.equal(await streamAt(replica, token, agentId), 200);
    assert.equal(await streamAt(replica, token, agentId), 200);
    const put = await call('PUT', '/v1/policy', { token, json: { default: 'deny', on_error: 'deny', rules: [] } });
    assert.equal(put.status, 200, put.text);
    assert.equal(await streamAt(replica, token, agentId), 403);
    const back = await call('PUT', '/v1/policy', { token, json: { default: 'allow', on_error: 'deny', rules: [] } });
    assert.equal(back.status, 200, back.text);
    assert.equal(await streamAt(replica, token, agentId), 200);
    // And the other way round.
    assert.equal(
      (await callAt(replica, 'PUT', '/v1/policy', { token, json: { default: 'deny', on_error: 'deny', rules: [] } }))
        .status,
      200,
    );
    assert.equal(await streamAt(stack().apiUrl, token, agentId), 403);
    await call('PUT', '/v1/policy', { token, json: { default: 'allow', on_error: 'deny', rules: [] } });
  });

  it('remembers a verified token only until it expires', async () => {
    const agentId = await createAgent(token, { upstream_url: up.url });
    const secret = new TextEncoder().encode(stack().config.auth.jwtSecret!);
    const exp = Math.floor(Date.now() / 1000) + 2;
    const short = await new SignJWT({
      tenant_id: (await call('GET', `/v1/agents/${agentId}`, { token })).json.tenant_id,
    })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('alice')
      .setExpirationTime(exp)
      .sign(secret);
    assert.equal(await streamAt(replica, short, agentId), 200);
    assert.equal(await streamAt(replica, short, agentId), 200);
    // Refused once expired, though the cache has it (by exp + 1 s at the latest: exp is in whole seconds).
    await waitFor(async () => (await streamAt(replica, short, agentId)) === 401, {
      timeoutMs: 4_000,
      everyMs: 100,
      what: 'the remembered token to be refused once expired',
    });
  });

  describe('the feed', () => {
    let feed: ChangeFeed;
    before(() => {
      feed = createChangeFeed(stack().config.databaseUrl, { heartbeatMs: 200, heartbeatTimeoutMs: 500 });
    });
    after(() => feed.close());

    it('answers from memory only while subscribed, and drops what a notification names', async () => {
      const reads: string[] = [];
      const cache = createFeedCache<string>(feed, { keyOf: (k) => (k.startsWith('agent:') ? k.slice(6) : null) });
      const id = `agt_feedtest-${randomUUID()}`;
      const load = async () => {
        reads.push(id);
        return 'v';
      };
      await waitFor(() => feed.live());
      await cache.get(id, load);
      await cache.get(id, load);
      assert.equal(reads.length, 1, 'the second read came from memory');

      // A notification, as the agents trigger sends it, from another connection.
      await stack()
        .orm.em.getConnection()
        .execute(`select pg_notify('gateway_cache', ?)`, [`agent:${id}`]);
      await waitFor(() => cache.size === 0);
      await cache.get(id, load);
      assert.equal(reads.length, 2, 'read again after the notification');

      // The feed's connection killed by the server: deaf, so every call reads the database.
      await stack()
        .orm.em.getConnection()
        .execute(
          `select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'gateway-cache-feed' and datname = current_database() and pid <> pg_backend_pid()`,
        );
      await waitFor(() => !feed.live());
      assert.equal(cache.size, 0, 'a lost subscription empties the cache');
      await cache.get(id, load);
      await cache.get(id, load);
      assert.equal(reads.length, 4, 'no answer from memory while the feed is down');

      // Back: answered from memory again.
      await waitFor(() => feed.live());
      await cache.get(id, load);
      await cache.get(id, load);
      assert.equal(reads.length, 5);
    });

    it('does not keep a read that a notification overtook', async () => {
      await waitFor(() => feed.live());
      const cache = createFeedCache<string>(feed, { keyOf: (k) => (k.startsWith('policy:') ? k.slice(7) : null) });
      const tenant = `t-${randomUUID()}`;
      let reads = 0;
      // The read is in flight when the change is notified: what it got may predate the change.
      await cache.get(tenant, async () => {
        reads += 1;
        const before = feed.generation();
        await stack()
          .orm.em.getConnection()
          .execute(`select pg_notify('gateway_cache', ?)`, [`policy:${tenant}`]);
        // Every notification moves the generation (it may have arrived before execute returned).
        await waitFor(() => feed.generation() !== before, { what: 'the notification to reach the feed' });
        return 'old';
      });
      assert.equal(cache.size, 0, 'the raced read was not stored');
      await cache.get(tenant, async () => {
        reads += 1;
        return 'new';
      });
      assert.equal(reads, 2);
      assert.equal(cache.size, 1);
    });
  });
});
