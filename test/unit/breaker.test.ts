// The circuit breakers of upstream calls (gateway/upstream/breaker.ts) without any upstream:
// the policies run functions that fail or answer as an upstream would. What counts as a
// failure (connect errors, timeouts, 5xx; never 4xx, SSRF refusals or a caller hanging up),
// the count that opens a circuit, failing fast while open, the half-open probe, one breaker
// per tenant and origin, and the bound on how many are kept. cockatiel reads Date.now() for
// the open pause, so the pause is either long (stays open) or zero (probe at once): no waits.
import assert from 'node:assert/strict';
import { BrokenCircuitError } from 'cockatiel';
import { BreakerRegistry } from '../../gateway/upstream/breaker.ts';
import { UpstreamError, type ErrorClass } from '../../gateway/upstream/errors.ts';

const URL_A = 'http://upstream-a.test:8080/agent';

const answer = (statusCode: number) => async () => ({ statusCode });
const failWith = (errorClass: ErrorClass) => async () => {
  throw new UpstreamError(errorClass, false);
};

/** Runs `fn` through the breaker; what it returned or threw. */
async function through(registry: BreakerRegistry, fn: () => Promise<unknown>, url = URL_A, tenant = 't1') {
  try {
    return await registry.for(url, tenant).execute(fn);
  } catch (err) {
    return err;
  }
}

const rarely = { errorRate: 0.99, minimumRps: 1_000_000 }; // keeps the error-rate breaker out of the way

describe('upstream circuit breaker', () => {
  it('opens after N consecutive connect errors, timeouts or 5xx answers, then fails fast without calling', async () => {
    for (const failure of [failWith('connect'), failWith('timeout'), answer(503)]) {
      const registry = new BreakerRegistry({ consecutiveFailures: 3, halfOpenAfterMs: 60_000, ...rarely });
      for (let i = 0; i < 2; i++) await through(registry, failure);
      assert.equal(registry.state(URL_A, 't1'), 'closed');
      await through(registry, failure);
      assert.equal(registry.state(URL_A, 't1'), 'open');
      let called = false;
      const result = await through(registry, async () => {
        called = true;
        return { statusCode: 200 };
      });
      assert.ok(result instanceof BrokenCircuitError);
      assert.equal(called, false);
    }
  });

  it('does not count 4xx answers, SSRF refusals or callers hanging up, and a success resets the count', async () => {
    const registry = new BreakerRegistry({ consecutiveFailures: 3, halfOpenAfterMs: 60_000, ...rarely });
    // Each many times in a row, with no success in between to reset a count.
    for (const fn of [answer(400), answer(404), answer(429), failWith('blocked'), failWith('caller_aborted')])
      for (let i = 0; i < 5; i++) await through(registry, fn);
    assert.equal(registry.state(URL_A, 't1'), 'closed');
    // Two failures, a success, two failures: never three in a row.
    for (const fn of [answer(500), answer(502), answer(200), answer(500), failWith('timeout')])
      await through(registry, fn);
    assert.equal(registry.state(URL_A, 't1'), 'closed');
    await through(registry, failWith('connect'));
    assert.equal(registry.state(URL_A, 't1'), 'open');
  });

  it('opens on the error rate over its window even with no long run of consecutive failures', async () => {
    const registry = new BreakerRegistry({
      consecutiveFailures: 1000,
      errorRate: 0.5,
      // At 1 call per second over 5 s, five calls are enough to judge by.
      windowMs: 5_000,
      minimumRps: 1,
      halfOpenAfterMs: 60_000,
    });
    for (let i = 0; i < 20 && registry.state(URL_A, 't1') === 'closed'; i++) {
      await through(registry, answer(500));
      await through(registry, answer(500));
      await through(registry, answer(200));
    }
    assert.equal(registry.state(URL_A, 't1'), 'open');
  });

  it('half-open: a good probe closes the circuit, a failed one opens it again', async () => {
    const registry = new BreakerRegistry({ consecutiveFailures: 2, halfOpenAfterMs: 0, ...rarely });
    const open = async () => {
      await through(registry, answer(500));
      await through(registry, answer(500));
    };
    await open();
    assert.equal(registry.state(URL_A, 't1'), 'open');
    // The pause is over at once: the next call is the probe, and it reaches the upstream.
    let probed = 0;
    const failedProbe = await through(registry, async () => {
      probed += 1;
      assert.equal(registry.state(URL_A, 't1'), 'half_open');
      return { statusCode: 502 };
    });
    assert.deepEqual(failedProbe, { statusCode: 502 });
    assert.equal(probed, 1);
    assert.equal(registry.state(URL_A, 't1'), 'open');
    assert.deepEqual(await through(registry, answer(200)), { statusCode: 200 });
    assert.equal(registry.state(URL_A, 't1'), 'closed');
  });

  it('half-open: while the probe is out the other calls wait for its verdict', async () => {
    const registry = new BreakerRegistry({ consecutiveFailures: 1, halfOpenAfterMs: 0, ...rarely });
    await through(registry, answer(500));
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const order: string[] = [];
    const probe = through(registry, async () => {
      order.push('probe');
      await held;
      order.push('probe answered');
      return { statusCode: 200 };
    });
    const others = [1, 2].map((n) =>
      through(registry, async () => {
        order.push(`call ${n}`);
        return { statusCode: 200 };
      }),
    );
    // Every call has reached the breaker; only the probe is under way.
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(order, ['probe']);
    release();
    assert.deepEqual(await Promise.all([probe, ...others]), [
      { statusCode: 200 },
      { statusCode: 200 },
      { statusCode: 200 },
    ]);
    assert.deepEqual(order.slice(0, 2), ['probe', 'probe answered']);
    assert.equal(registry.state(URL_A, 't1'), 'closed');
  });

  it('keeps one breaker per tenant and origin: another tenant, scheme or port is unaffected, another path is not', async () => {
    const registry = new BreakerRegistry({ consecutiveFailures: 1, halfOpenAfterMs: 60_000, ...rarely });
    await through(registry, answer(500), URL_A, 't1');
    assert.equal(registry.state(URL_A, 't1'), 'open');
    assert.equal(registry.state('http://upstream-a.test:8080/other/path?q=1', 't1'), 'open');
    assert.equal(registry.state('HTTP://UPSTREAM-A.test:8080/', 't1'), 'open');
    assert.equal(registry.state(URL_A, 't2'), 'closed');
    assert.equal(registry.state('https://upstream-a.test:8080/agent', 't1'), 'closed');
    assert.equal(registry.state('http://upstream-a.test:8081/agent', 't1'), 'closed');
    assert.equal(registry.state('http://upstream-b.test:8080/agent', 't1'), 'closed');
  });

  it('keeps at most `max` breakers, dropping the least recently used first', () => {
    const registry = new BreakerRegistry({}, { max: 3, idleMs: 3_600_000 });
    const url = (n: number) => `http://u${n}.test/`;
    const [p1, p2, p3] = [1, 2, 3].map((n) => registry.for(url(n)));
    registry.for(url(1)); // order of use: 2, 3, 1
    const p4 = registry.for(url(4)); // 2 goes: 3, 1, 4
    assert.equal(registry.size, 3);
    assert.equal(registry.for(url(1)), p1); // 3, 4, 1
    assert.equal(registry.for(url(3)), p3); // 4, 1, 3
    assert.notEqual(registry.for(url(2)), p2); // a new breaker; 4 goes: 1, 3, 2
    assert.equal(registry.size, 3);
    assert.notEqual(registry.for(url(4)), p4);
  });

  it('drops a breaker once it has been idle for idleMs', () => {
    const registry = new BreakerRegistry({}, { max: 100, idleMs: 0 });
    const first = registry.for('http://u1.test/');
    registry.for('http://u2.test/'); // idle for 0 ms or more: u1 goes
    assert.equal(registry.size, 1);
    assert.notEqual(registry.for('http://u1.test/'), first);
    const kept = new BreakerRegistry({}, { max: 100, idleMs: 3_600_000 });
    const keptFirst = kept.for('http://u1.test/');
    kept.for('http://u2.test/');
    assert.equal(kept.size, 2);
    assert.equal(kept.for('http://u1.test/'), keptFirst);
  });
});
