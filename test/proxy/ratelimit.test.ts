// Rate limits: the token-bucket arithmetic (memory, on a controlled clock), the same rules on
// the test stack's own Redis (one Lua script, shared by every replica), and the 429s
// the invoke endpoints give, per agent and globally, in memory and shared through Redis.
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { call } from '../support/http.ts';
import { createAgent, rawUpstream, readAll, startProxyApp, type RawUpstream } from '../support/proxy-helpers.ts';
import {
  createMemoryLimiter,
  createRedisLimiter,
  bucketsFor,
  retryAfterSeconds,
  type RateLimiter,
} from '../../gateway/ratelimit/index.ts';
import { TAKE_SCRIPT } from '../../gateway/ratelimit/redis.ts';

// The run's own Redis (test/support/stack.ts), read once the stack is up.
const redisUrl = () => stack().redisUrl;
const settings = {
  agentRps: 50,
  agentBurst: 100,
  tenantRps: 500,
  tenantBurst: 1000,
  globalRps: 2000,
  globalBurst: 4000,
};

async function takeN(limiter: RateLimiter, n: number, buckets: Parameters<RateLimiter['take']>[0]) {
  const out = [];
  for (let i = 0; i < n; i++) out.push(await limiter.take(buckets));
  return out;
}

describe('rate limits', () => {
  describe('token bucket arithmetic (memory, controlled clock)', () => {
    let now = 0;
    const limiter = createMemoryLimiter(() => now);

    it('allows the burst, then refuses with Retry-After = ceil(time to the next token)', async () => {
      const bucket = [{ key: `a-${randomUUID()}`, rate: 0.4, burst: 3 }];
      const decisions = await takeN(limiter, 4, bucket);
      assert.deepEqual(
        decisions.slice(0, 3).map((d) => d.allowed),
        [true, true, true],
      );
      assert.deepEqual(decisions[3], { allowed: false, retryAfterSeconds: 3, bucket: bucket[0].key }); // 2.5 s → 3
      now += 1000;
      const later = await limiter.take(bucket);
      assert.equal(!later.allowed && later.retryAfterSeconds, 2); // 1.5 s → 2
      now += 1500;
      assert.equal((await limiter.take(bucket)).allowed, true);
      assert.equal((await limiter.take(bucket)).allowed, false);
    });

    it('clamps Retry-After to at least 1 and at most 60', async () => {
      const fast = [{ key: `f-${randomUUID()}`, rate: 1000, burst: 1 }];
      await limiter.take(fast);
      const f = await limiter.take(fast);
      assert.equal(!f.allowed && f.retryAfterSeconds, 1);
      const slow = [{ key: `s-${randomUUID()}`, rate: 0.001, burst: 1 }];
      await limiter.take(slow);
      const s = await limiter.take(slow);
      assert.equal(!s.allowed && s.retryAfterSeconds, 60);
      assert.equal(retryAfterSeconds(0.4), 1);
      assert.equal(retryAfterSeconds(59_001), 60);
      assert.equal(retryAfterSeconds(3_600_000), 60);
    });

    it('takes from every bucket or from none', async () => {
      const agent = { key: `agent-${randomUUID()}`, rate: 0.001, burst: 5 };
      const global = { key: `global-${randomUUID()}`, rate: 0.001, burst: 1 };
      assert.equal((await limiter.take([agent, global])).allowed, true);
      const refused = await limiter.take([agent, global]);
      assert.equal(!refused.allowed && refused.bucket, global.key);
      // The refusal took nothing from the agent's bucket: 4 tokens are left.
      assert.deepEqual(
        (await takeN(limiter, 5, [agent])).map((d) => d.allowed),
        [true, true, true, true, false],
      );
    });

    it('uses the agent’s rate with a burst of 20 when only the rate is set, else the configured default', () => {
      assert.deepEqual(
        bucketsFor({ id: 'agt_1', tenantId: 't1', rateLimitRps: 2, rateLimitBurst: null }, settings)[0],
        {
          key: 'agent:agt_1',
          rate: 2,
          burst: 20,
        },
      );
      assert.deepEqual(bucketsFor({ id: 'agt_1', tenantId: 't1', rateLimitRps: 2, rateLimitBurst: 7 }, settings)[0], {
        key: 'agent:agt_1',
        rate: 2,
        burst: 7,
      });
      // Then the tenant's bucket and the global one, for every agent alike.
      assert.deepEqual(
        bucketsFor({ id: 'agt_1', tenantId: 't1', rateLimitRps: null, rateLimitBurst: null }, settings),
        [
          { key: 'agent:agt_1', rate: 50, burst: 100 },
          { key: 'tenant:t1', rate: 500, burst: 1000 },
          { key: 'global', rate: 2000, burst: 4000 },
        ],
      );
    });
  });

  describe('shared through the real Redis', () => {
    const prefix = `gw:rl:test:${randomUUID()}:`;
    let a: RateLimiter;
    let b: RateLimiter;
    before(() => {
      a = createRedisLimiter(redisUrl(), { prefix });
      b = createRedisLimiter(redisUrl(), { prefix });
    });
    after(async () => {
      await a.close();
      await b.close();
    });

    it('applies the same rules: burst, Retry-After, and all-or-nothing', async () => {
      const bucket = { key: 'agent:one', rate: 0.4, burst: 3 };
      const decisions = await takeN(a, 4, [bucket]);
      assert.deepEqual(
        decisions.map((d) => d.allowed),
        [true, true, true, false],
      );
      assert.equal(!decisions[3].allowed && decisions[3].retryAfterSeconds, 3);
      const tiny = { key: 'agent:tiny', rate: 0.001, burst: 1 };
      await a.take([tiny]);
      const capped = await a.take([tiny]);
      assert.equal(!capped.allowed && capped.retryAfterSeconds, 60);

      const agent = { key: 'agent:aon', rate: 0.001, burst: 5 };
      const global = { key: 'global', rate: 0.001, burst: 1 };
      assert.equal((await a.take([agent, global])).allowed, true);
      const refused = await a.take([agent, global]);
      assert.equal(!refused.allowed && refused.bucket, 'global');
      assert.deepEqual(
        (await takeN(a, 5, [agent])).map((d) => d.allowed),
        [true, true, true, true, false],
      );
    });

    it('is one bucket for every replica: two clients spend the same tokens', async () => {
      const bucket = { key: 'agent:shared', rate: 0.01, burst: 4 };
      const order = [a, b, a, b, b, a];
      const results = [];
      for (const limiter of order) results.push((await limiter.take([bucket])).allowed);
      assert.deepEqual(results, [true, true, true, true, false, false]);
    });

    it('keeps the decision in one Lua script on Redis’s clock, and lets idle buckets expire', async () => {
      const redis = new Redis(redisUrl());
      try {
        const sha = createHash('sha1').update(TAKE_SCRIPT).digest('hex');
        assert.deepEqual(await redis.script('EXISTS', sha), [1]);
        await a.take([{ key: 'agent:clock', rate: 1, burst: 2 }]);
        const [sec, usec] = await redis.time();
        const redisNowMs = Number(sec) * 1000 + Number(usec) / 1000;
        const stamped = Number(await redis.hget(`${prefix}agent:clock`, 'at'));
        assert.ok(Math.abs(redisNowMs - stamped) < 1000, 'stamped with Redis TIME');
        const ttl = await redis.pttl(`${prefix}agent:clock`);
        assert.ok(ttl > 0 && ttl <= 3000, `ttl ${ttl}`);
      } finally {
        redis.disconnect();
      }
    });

    it('fails open when Redis cannot be reached, and says so', async () => {
      const errors: string[] = [];
      const down = createRedisLimiter('redis://127.0.0.1:1', { onError: (e) => errors.push(e.message) });
      try {
        assert.deepEqual(await down.take([{ key: 'x', rate: 1, burst: 1 }]), { allowed: true });
        assert.ok(errors.length > 0);
      } finally {
        await down.close();
      }
    });
  });

  describe('429 from the invoke endpoints', () => {
    let up: RawUpstream;
    let token: string;
    before(async () => {
      up = await rawUpstream((req, res) => void readAll(req).then(() => res.end('ok')));
      token = await stack().token(`tenant-rl-${randomUUID()}`);
    });
    after(() => up.close());

    it('gives an agent with only a rate a burst of 20, shared by both endpoints', async () => {
      // One token per 50 s: however slow the machine, no token refills during the 20 calls.
      const agentId = await createAgent(token, { upstream_url: up.url, rate_limit_rps: 0.02 });
      const statuses: number[] = [];
      for (let i = 0; i < 10; i++)
        statuses.push((await call('POST', `/v1/proxy/${agentId}`, { token, body: 'x' })).status);
      for (let i = 0; i < 10; i++)
        statuses.push((await call('POST', `/v1/proxy/${agentId}/stream`, { token, body: 'x' })).status);
      assert.deepEqual(statuses, [...Array(10).fill(202), ...Array(10).fill(200)]);
      for (const path of [`/v1/proxy/${agentId}`, `/v1/proxy/${agentId}/stream`]) {
        const refused = await call('POST', path, { token, body: 'x' });
        assert.equal(refused.status, 429);
        assert.deepEqual(refused.json, { error: 'rate limit exceeded' });
        const retryAfter = Number(refused.headers['retry-after']);
        assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 50, String(retryAfter));
      }
    });

    it('refuses calls past the global bucket whichever agent they are for (Retry-After capped at 60)', async () => {
      const gateway = await startProxyApp({
        rateLimit: { ...stack().config.rateLimit, globalRps: 0.01, globalBurst: 3 },
      });
      try {
        const agents = [];
        for (let i = 0; i < 4; i++) agents.push(await createAgent(token, { upstream_url: up.url }));
        const statuses = [];
        let last;
        for (const agentId of agents) {
          last = await request(`${gateway.url}/v1/proxy/${agentId}/stream`, {
            method: 'POST',
            headers: { authorization: `Bearer ${token}` },
            body: 'x',
          });
          statuses.push(last.statusCode);
          await last.body.dump();
        }
        assert.deepEqual(statuses, [200, 200, 200, 429]);
        assert.equal(last!.headers['retry-after'], '60');
      } finally {
        await gateway.close();
      }
    });

    it('shares an agent’s bucket between two gateway replicas through Redis', async () => {
      const prefix = `gw:rl:test:${randomUUID()}:`;
      const replicas = [
        await startProxyApp({ redisUrl: redisUrl() }, { limiter: createRedisLimiter(redisUrl(), { prefix }) }),
        await startProxyApp({ redisUrl: redisUrl() }, { limiter: createRedisLimiter(redisUrl(), { prefix }) }),
      ];
      try {
        const agentId = await createAgent(token, { upstream_url: up.url, rate_limit_rps: 0.01, rate_limit_burst: 3 });
        const statuses = [];
        for (const i of [0, 1, 0, 1, 0]) {
          const res = await request(`${replicas[i].url}/v1/proxy/${agentId}/stream`, {
            method: 'POST',
            headers: { authorization: `Bearer ${token}` },
            body: 'x',
          });
          statuses.push(res.statusCode);
          if (res.statusCode === 429) assert.equal(res.headers['retry-after'], '60');
          await res.body.dump();
        }
        assert.deepEqual(statuses, [200, 200, 200, 429, 429]);
      } finally {
        for (const r of replicas) await r.close();
      }
    });
  });
});
