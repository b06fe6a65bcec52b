// The in-process token buckets (gateway/ratelimit/limiter.ts) on an injected clock: a burst
// then refusals, refill at the rate, all-or-nothing across an agent's and the global bucket,
// and Retry-After as docs/API.md "Limits" states it (whole seconds until every refusing
// bucket has a token again, at least 1, at most 60). Also which buckets a call takes from.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { bucketsFor, createMemoryLimiter, retryAfterSeconds, type Bucket } from '../../gateway/ratelimit/index.ts';

function clock(start = 10_000) {
  const c = { now: start, read: () => c.now };
  return c;
}

describe('rate limiter (in process)', () => {
  it('lets a burst through at once, then refuses until a token refills at the rate', async () => {
    const time = clock();
    const limiter = createMemoryLimiter(time.read);
    const bucket: Bucket = { key: 'agent:a', rate: 2, burst: 3 };
    for (let i = 0; i < 3; i++) assert.deepEqual(await limiter.take([bucket]), { allowed: true });
    assert.deepEqual(await limiter.take([bucket]), { allowed: false, retryAfterSeconds: 1, bucket: 'agent:a' });
    time.now += 499;
    assert.equal((await limiter.take([bucket])).allowed, false);
    time.now += 1; // 500 ms at 2/s: one token
    assert.deepEqual(await limiter.take([bucket]), { allowed: true });
    assert.equal((await limiter.take([bucket])).allowed, false);
    // A long quiet spell refills to the burst, never beyond it.
    time.now += 3_600_000;
    for (let i = 0; i < 3; i++) assert.equal((await limiter.take([bucket])).allowed, true);
    assert.equal((await limiter.take([bucket])).allowed, false);
  });

  it('takes from every bucket or from none: a refused call costs the other buckets nothing', async () => {
    const time = clock();
    const limiter = createMemoryLimiter(time.read);
    const agentA: Bucket = { key: 'agent:a', rate: 1, burst: 1 };
    const agentB: Bucket = { key: 'agent:b', rate: 1, burst: 5 };
    const global: Bucket = { key: 'global', rate: 1, burst: 2 };
    assert.equal((await limiter.take([agentA, global])).allowed, true);
    // agent:a is empty: refused, and the global bucket keeps its last token for agent b.
    for (let i = 0; i < 5; i++)
      assert.deepEqual(await limiter.take([agentA, global]), {
        allowed: false,
        retryAfterSeconds: 1,
        bucket: 'agent:a',
      });
    assert.equal((await limiter.take([agentB, global])).allowed, true);
    assert.deepEqual(await limiter.take([agentB, global]), { allowed: false, retryAfterSeconds: 1, bucket: 'global' });
  });

  it('names the bucket that needs longest and waits for it: Retry-After covers every refusing bucket', async () => {
    const time = clock();
    const limiter = createMemoryLimiter(time.read);
    const fast: Bucket = { key: 'fast', rate: 1, burst: 1 };
    const slow: Bucket = { key: 'slow', rate: 0.1, burst: 1 };
    assert.equal((await limiter.take([fast, slow])).allowed, true);
    assert.deepEqual(await limiter.take([fast, slow]), { allowed: false, retryAfterSeconds: 10, bucket: 'slow' });
    time.now += 9_000;
    assert.deepEqual(await limiter.take([fast, slow]), { allowed: false, retryAfterSeconds: 1, bucket: 'slow' });
    time.now += 1_000;
    assert.equal((await limiter.take([fast, slow])).allowed, true);
    // Whatever the order the buckets come in.
    assert.deepEqual(await limiter.take([slow, fast]), { allowed: false, retryAfterSeconds: 10, bucket: 'slow' });
  });

  it('caps Retry-After at 60 s for a bucket slower than one a minute', async () => {
    const limiter = createMemoryLimiter(clock().read);
    const slow: Bucket = { key: 'slow', rate: 1 / 3600, burst: 1 };
    await limiter.take([slow]);
    assert.deepEqual(await limiter.take([slow]), { allowed: false, retryAfterSeconds: 60, bucket: 'slow' });
  });

  it('Retry-After is the wait in whole seconds, rounded up, within [1, 60]', () => {
    assert.equal(retryAfterSeconds(0), 1);
    assert.equal(retryAfterSeconds(1), 1);
    assert.equal(retryAfterSeconds(1000), 1);
    assert.equal(retryAfterSeconds(1001), 2);
    assert.equal(retryAfterSeconds(59_999), 60);
    assert.equal(retryAfterSeconds(600_000), 60);
    fc.assert(
      fc.property(fc.double({ min: 0, max: 1e9, noNaN: true }), (waitMs) => {
        const s = retryAfterSeconds(waitMs);
        assert.ok(Number.isInteger(s) && s >= 1 && s <= 60);
        // Never earlier than the token is due, unless capped.
        if (s < 60) assert.ok(s * 1000 >= waitMs);
        // And never a whole second later than it.
        if (waitMs >= 1000) assert.ok((s - 1) * 1000 < waitMs);
      }),
    );
  });

  it('a caller who retries when told is let through, and never more often than the rate over time', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 50 }),
        fc.integer({ min: 1, max: 20 }),
        fc.array(fc.nat({ max: 3_000 }), { minLength: 1, maxLength: 100 }),
        async (rate, burst, gaps) => {
          const time = clock();
          const limiter = createMemoryLimiter(time.read);
          const bucket: Bucket = { key: 'k', rate, burst };
          let allowed = 0;
          const start = time.now;
          for (const gap of gaps) {
            time.now += gap;
            const decision = await limiter.take([bucket]);
            if (decision.allowed) {
              allowed += 1;
            } else {
              // Waiting the Retry-After it gave always finds a token.
              time.now += decision.retryAfterSeconds * 1000;
              assert.deepEqual(await limiter.take([bucket]), { allowed: true });
              allowed += 1;
            }
          }
          // Token bucket bound: at most burst + rate × elapsed calls.
          assert.ok(allowed <= burst + (rate * (time.now - start)) / 1000 + 1e-9);
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('buckets of a proxied call', () => {
  const settings = {
    agentRps: 10,
    agentBurst: 30,
    tenantRps: 250,
    tenantBurst: 500,
    globalRps: 1000,
    globalBurst: 2000,
  };

  it('gives the agent its own rate (burst 20 when only the rate is set) or the defaults, its tenant’s bucket and the global one', () => {
    assert.deepEqual(bucketsFor({ id: 'agt_1', tenantId: 't1', rateLimitRps: null, rateLimitBurst: null }, settings), [
      { key: 'agent:agt_1', rate: 10, burst: 30 },
      { key: 'tenant:t1', rate: 250, burst: 500 },
      { key: 'global', rate: 1000, burst: 2000 },
    ]);
    assert.deepEqual(bucketsFor({ id: 'agt_1', tenantId: 't1', rateLimitRps: 2, rateLimitBurst: null }, settings)[0], {
      key: 'agent:agt_1',
      rate: 2,
      burst: 20,
    });
    assert.deepEqual(bucketsFor({ id: 'agt_1', tenantId: 't1', rateLimitRps: 2, rateLimitBurst: 4 }, settings)[0], {
      key: 'agent:agt_1',
      rate: 2,
      burst: 4,
    });
    // A rate read from PostgreSQL as a string is a number all the same.
    const fromDb = { id: 'agt_1', tenantId: 't1', rateLimitRps: '2.5' as unknown as number, rateLimitBurst: null };
    assert.equal(bucketsFor(fromDb, settings)[0].rate, 2.5);
  });

  it('never hands out a bucket that holds no token', () => {
    const buckets = bucketsFor(
      { id: 'agt_1', tenantId: 't1', rateLimitRps: 1, rateLimitBurst: 0 },
      { ...settings, tenantBurst: 0, globalBurst: 0 },
    );
    assert.deepEqual(
      buckets.map((b) => b.burst),
      [1, 1, 1],
    );
  });
});
