// The upstream client's resilience rules, against real local servers: connect failures
// retried with full-jitter backoff under the deadline, what may and may not be re-sent, and
// the breaker's open → half-open → closed (or re-opened) cycle. The backoff arithmetic and the
// breaker's rules alone are unit tests (test/unit/retry.test.ts, test/unit/breaker.test.ts).
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { Readable } from 'node:stream';
import { closedPort, rawUpstream, readAll, type RawUpstream } from '../support/proxy-helpers.ts';
import {
  createUpstreamClient,
  UpstreamError,
  type UpstreamClient,
  type UpstreamRequest,
} from '../../gateway/upstream/client.ts';
import { circuitKey } from '../../gateway/upstream/open-circuits.ts';
import { waitFor } from '../support/wait.ts';

/** Waits until the circuit of `url` may half-open, as its breaker announced when it opened. */
async function openPeriodOver(client: UpstreamClient, url: string): Promise<void> {
  await waitFor(async () => (await client.breakers.circuits.openFor(circuitKey(url))) === 0, {
    everyMs: 10,
    what: `the circuit of ${url} to end its open period`,
  });
}
// Each attempt counts with the breaker; tests of the retry loop keep it out of the way.
const NO_BREAKER = { consecutiveFailures: 1_000_000, minimumRps: 1_000_000 };

function req(url: string, extra: Partial<UpstreamRequest> = {}): UpstreamRequest {
  return {
    url,
    headers: {},
    body: Buffer.from('payload'),
    deadlineMs: 3_000,
    deadlineCoversBody: true,
    resendAllowed: false,
    ...extra,
  };
}

describe('upstream resilience', () => {
  let client: UpstreamClient;
  afterEach(() => client?.close());

  describe('retries', () => {
    it('retries a refused connection until the upstream appears, within the deadline', async () => {
      const port = await closedPort();
      client = createUpstreamClient({
        allow: ['127.0.0.1'],
        retry: { maxAttempts: 50, baseMs: 20, capMs: 100 },
        breaker: NO_BREAKER,
      });
      const server = createServer((r, res) => void readAll(r).then((b) => res.end(`late ${b}`)));
      setTimeout(() => server.listen(port, '127.0.0.1'), 400);
      try {
        const res = await client.open(req(`http://127.0.0.1:${port}/`));
        assert.equal(res.status, 200);
        assert.equal(await res.body.text(), 'late payload');
        assert.ok(res.attempts > 1, `attempts ${res.attempts}`);
      } finally {
        server.close();
      }
    });

    it('gives up at the deadline (no retry may end past it)', async () => {
      const port = await closedPort();
      client = createUpstreamClient({
        allow: ['127.0.0.1'],
        retry: { maxAttempts: 1000, baseMs: 50, capMs: 200 },
        breaker: NO_BREAKER,
      });
      // The same calls with a far longer deadline, started first: the short one must end while
      // that one still retries, so its own deadline ended it.
      const stop = new AbortController();
      let longerEnded = false;
      const longer = client
        .open(req(`http://127.0.0.1:${port}/`, { deadlineMs: 120_000, signal: stop.signal }))
        .catch((e: unknown) => e)
        .finally(() => (longerEnded = true));
      const err = await client.open(req(`http://127.0.0.1:${port}/`, { deadlineMs: 600 })).catch((e: unknown) => e);
      assert.ok(err instanceof UpstreamError);
      // Refused until the last attempt, which the deadline may cut short.
      assert.ok(['connect', 'timeout'].includes(err.errorClass), err.errorClass);
      assert.equal(longerEnded, false, 'the call with the longer deadline still retries');
      stop.abort();
      const stopped = await longer;
      assert.ok(stopped instanceof UpstreamError && stopped.errorClass === 'caller_aborted');
    });

    it('retries a refused connection for a streamed body it has not started reading', async () => {
      const port = await closedPort();
      client = createUpstreamClient({
        allow: ['127.0.0.1'],
        retry: { maxAttempts: 50, baseMs: 20, capMs: 100 },
        breaker: NO_BREAKER,
      });
      const server = createServer((r, res) => void readAll(r).then((b) => res.end(`streamed ${b}`)));
      setTimeout(() => server.listen(port, '127.0.0.1'), 300);
      try {
        const res = await client.open(
          req(`http://127.0.0.1:${port}/`, { body: Readable.from([Buffer.from('a'), Buffer.from('b')]) }),
        );
        assert.equal(await res.body.text(), 'streamed ab');
      } finally {
        server.close();
      }
    });

    it('does not re-send after the request reached the upstream unless allowed, and then honours Retry-After', async () => {
      let hits = 0;
      const up = await rawUpstream((r, res) => {
        void readAll(r).then(() => {
          hits += 1;
          if (hits === 1) {
            res.writeHead(503, { 'retry-after': '1' });
            res.end();
          } else res.end('second');
        });
      });
      // The waits between attempts, on a clock of the test's own: asked for, not sat out.
      const waits: number[] = [];
      try {
        client = createUpstreamClient({ allow: ['127.0.0.1'], wait: async (ms) => waits.push(ms) });
        const once = await client.open(req(up.url));
        assert.equal(once.status, 503);
        await once.body.dump();
        assert.equal(hits, 1);

        hits = 0;
        const twice = await client.open(req(up.url, { resendAllowed: true }));
        assert.equal(twice.status, 200);
        assert.equal(twice.attempts, 2);
        assert.equal(waits.length, 1);
        assert.ok(waits[0] >= 1_000, `waited ${waits[0]} ms, not the Retry-After's second`);

        // A Retry-After beyond the deadline is not waited for: the 503 is the answer.
        hits = 0;
        const short = await client.open(req(up.url, { resendAllowed: true, deadlineMs: 500 }));
        assert.equal(short.status, 503);
        assert.equal(short.attempts, 1);
        assert.equal(waits.length, 1, 'nothing more waited');
        await short.body.dump();

        // A streamed body cannot be sent twice, opt-in or not.
        hits = 0;
        const streamed = await client.open(
          req(up.url, { resendAllowed: true, body: Readable.from([Buffer.from('s')]) }),
        );
        assert.equal(streamed.status, 503);
        await streamed.body.dump();
        assert.equal(hits, 1);
      } finally {
        await up.close();
      }
    });

    it('ends the call at a timeout: the attempt had the whole remaining deadline, and is not re-sent', async () => {
      let hits = 0;
      const up = await rawUpstream((r, res) => {
        void readAll(r).then(() => {
          hits += 1;
          if (hits > 1) res.end('fast now');
          // The first request is never answered.
        });
      });
      try {
        client = createUpstreamClient({ allow: ['127.0.0.1'] });
        const err = await client.open(req(up.url, { deadlineMs: 400, resendAllowed: true })).catch((e: unknown) => e);
        assert.ok(err instanceof UpstreamError && err.errorClass === 'timeout');
        assert.equal(hits, 1);
      } finally {
        await up.close();
      }
    });
  });

  describe('circuit breaker', () => {
    let up: RawUpstream;
    let healthy = false;
    before(async () => {
      up = await rawUpstream((r, res) => {
        void readAll(r).then(() => {
          res.statusCode = healthy ? 200 : 502;
          res.end(healthy ? 'fine' : 'bad gateway');
        });
      });
    });
    after(() => up.close());

    it('opens after consecutive failures, fails fast, probes half-open, re-opens on a failed probe and closes on a good one', async () => {
      healthy = false;
      client = createUpstreamClient({
        allow: ['127.0.0.1'],
        breaker: { consecutiveFailures: 3, halfOpenAfterMs: 300 },
      });
      const call = async () => {
        try {
          const res = await client.open(req(up.url));
          await res.body.dump();
          return res.status;
        } catch (err) {
          return (err as UpstreamError).errorClass;
        }
      };
      assert.deepEqual([await call(), await call(), await call()], [502, 502, 502]);
      assert.equal(client.breakers.state(up.url), 'open');
      const before = up.hits.length;
      assert.equal(await call(), 'circuit_open');
      assert.equal(up.hits.length, before, 'nothing sent while open');

      await openPeriodOver(client, up.url);
      // Half-open: one probe goes through; it fails, so the circuit opens again.
      assert.equal(await call(), 502);
      assert.equal(client.breakers.state(up.url), 'open');
      assert.equal(await call(), 'circuit_open');

      await openPeriodOver(client, up.url);
      healthy = true;
      assert.equal(await call(), 200, 'the probe succeeds');
      assert.equal(client.breakers.state(up.url), 'closed');
      assert.deepEqual([await call(), await call()], [200, 200]);
    });

    it('lets one probe through while half-open; the others wait for its verdict', async () => {
      let inFlight = 0;
      let maxInFlight = 0;
      let ok = false;
      // The answers are held until the test lets them go: the probe is still in flight when the
      // others arrive.
      let held: Promise<void> = Promise.resolve();
      let letGo = () => {};
      const hold = () => (held = new Promise<void>((r) => (letGo = r)));
      const slow = await rawUpstream((r, res) => {
        void readAll(r).then(async () => {
          inFlight += 1;
          maxInFlight = Math.max(maxInFlight, inFlight);
          await held;
          inFlight -= 1;
          res.statusCode = ok ? 200 : 502;
          res.end();
        });
      });
      const concurrently = () =>
        Promise.all(
          [0, 1, 2].map(() =>
            client.open(req(slow.url)).then(
              async (r) => {
                await r.body.dump();
                return r.status as number | string;
              },
              (e: UpstreamError) => e.errorClass as number | string,
            ),
          ),
        );
      try {
        client = createUpstreamClient({
          allow: ['127.0.0.1'],
          breaker: { consecutiveFailures: 1, halfOpenAfterMs: 200 },
        });
        await (await client.open(req(slow.url))).body.dump();
        assert.equal(client.breakers.state(slow.url), 'open');

        // A failing probe: the waiting calls are refused without reaching the upstream.
        await openPeriodOver(client, slow.url);
        let hits = slow.hits.length;
        hold();
        let answers = concurrently();
        // All three calls were made before the probe reached the upstream.
        await waitFor(() => slow.hits.length >= hits + 1, { what: 'the probe to reach the upstream' });
        letGo();
        assert.deepEqual((await answers).sort(), [502, 'circuit_open', 'circuit_open'].sort());
        assert.equal(slow.hits.length, hits + 1);

        // A good probe: the waiting calls go through after it, never alongside it.
        await openPeriodOver(client, slow.url);
        ok = true;
        hits = slow.hits.length;
        maxInFlight = 0;
        hold();
        answers = concurrently();
        await waitFor(() => slow.hits.length >= hits + 1, { what: 'the probe to reach the upstream' });
        letGo();
        assert.deepEqual(await answers, [200, 200, 200]);
        assert.equal(client.breakers.state(slow.url), 'closed');
        assert.equal(slow.hits.length, hits + 3);
        assert.ok(maxInFlight <= 2, 'the probe ran alone before the others were let through');
      } finally {
        await slow.close();
      }
    });

    it('opens on an error rate even without a long run of consecutive failures', async () => {
      healthy = true;
      client = createUpstreamClient({
        allow: ['127.0.0.1'],
        breaker: { consecutiveFailures: 1000, errorRate: 0.5, windowMs: 5_000, minimumRps: 1, halfOpenAfterMs: 10_000 },
      });
      const results: Array<number | string> = [];
      for (let i = 0; i < 30 && client.breakers.state(up.url) === 'closed'; i++) {
        healthy = i % 3 === 0; // two failures in every three calls, never more than two in a row
        const res = await client.open(req(up.url)).catch((e: UpstreamError) => e);
        if (res instanceof UpstreamError) results.push(res.errorClass);
        else {
          results.push(res.status);
          await res.body.dump();
        }
      }
      assert.equal(client.breakers.state(up.url), 'open', JSON.stringify(results));
    });

    it('does not count 4xx answers or SSRF refusals as failures', async () => {
      const notFound = await rawUpstream((r, res) => void readAll(r).then(() => ((res.statusCode = 404), res.end())));
      try {
        client = createUpstreamClient({ allow: ['127.0.0.1'], breaker: { consecutiveFailures: 2 } });
        for (let i = 0; i < 5; i++) await (await client.open(req(notFound.url))).body.dump();
        assert.equal(client.breakers.state(notFound.url), 'closed');
      } finally {
        await notFound.close();
      }
    });
  });
});
