// Analytics: every parameter rule and 400 of the v1 contract; the figures (counts, error rates,
// errors by class, latency and TTFT p50/p95/p99) held against a brute-force computation
// over the raw invocation rows, per hour and per day; the live path (a real invocation is
// folded into the rollups after it completes); and the endpoint's own 429.
import assert from 'node:assert/strict';
import { stack } from '../support/stack.ts';
import { summarizeClosedBuckets } from '../../gateway/analytics/summaries.ts';
import { waitFor } from '../support/wait.ts';
import { analyticsCaughtUp } from '../support/analytics.ts';
import { call, uniqueName, waitForInvocation } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { exactPercentile } from '../../gateway/analytics/sketch.ts';
import { newId } from '../../lib/ids.ts';

type Sample = {
  agent: string;
  createdAt: number;
  status: 'succeeded' | 'failed';
  errorClass: string | null;
  latency: number | null;
  ttft: number | null;
};

let seq = 0;
async function caller(prefix = 'ana'): Promise<{ tenant: string; token: string }> {
  seq += 1;
  const tenant = `${prefix}-${process.pid}-${seq}-${Math.random().toString(36).slice(2, 7)}`;
  return { tenant, token: await stack().token(tenant, `user-${seq}`) };
}

/** mulberry32: a small seeded generator, so a failure reproduces. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Writes the samples as invocation rows the way the gateway does: half are inserted
 * `running` and then completed by an UPDATE (the activity's path), half are inserted already
 * terminal (any path that writes a finished row). The fold sees both; this waits for it.
 */
async function insertSamples(tenant: string, samples: Sample[]): Promise<void> {
  const conn = stack().orm.em.getConnection();
  for (let i = 0; i < samples.length; i += 500) {
    const chunk = samples.slice(i, i + 500);
    const values: unknown[] = [];
    const rows = chunk.map((s, j) => {
      const later = (i + j) % 2 === 0;
      values.push(
        newId('inv'),
        tenant,
        s.agent,
        later ? 'running' : s.status,
        later ? s.status : null,
        s.latency,
        s.ttft,
        s.errorClass,
        new Date(s.createdAt).toISOString(),
      );
      return `(?, ?, ?, 'transactional', ?, 'req', 'user', ?, ?, ?, ?, ?::timestamptz, 1)`;
    });
    await conn.execute(
      `insert into invocations (id, tenant_id, agent_id, mode, status, request_id, caller, model, latency_ms, ttft_ms, error_class, created_at, attempts) values ${rows.join(', ')}`,
      values,
    );
  }
  // The completion: the final status was parked in `model` for the rows inserted running.
  await conn.execute(
    `update invocations set status = model, model = null, completed_at = now() where tenant_id = ? and status = 'running' and model is not null`,
    [tenant],
  );
  await analyticsCaughtUp();
}

function bruteForce(samples: Sample[], bucket: 'hour' | 'day') {
  const size = bucket === 'hour' ? 3600_000 : 86_400_000;
  const groups = new Map<string, Sample[]>();
  for (const s of samples) {
    const key = `${new Date(Math.floor(s.createdAt / size) * size).toISOString()}|${s.agent}`;
    groups.set(key, [...(groups.get(key) ?? []), s]);
  }
  const pct = (values: number[]) => {
    const sorted = [...values].sort((a, b) => a - b);
    return {
      p50: exactPercentile(sorted, 0.5),
      p95: exactPercentile(sorted, 0.95),
      p99: exactPercentile(sorted, 0.99),
    };
  };
  return [...groups.entries()]
    .map(([key, list]) => {
      const [bucketStart, agent] = key.split('|');
      const errors = list.filter((s) => s.status === 'failed' || s.errorClass !== null);
      const byClass: Record<string, number> = {};
      for (const e of errors) byClass[e.errorClass ?? 'unknown'] = (byClass[e.errorClass ?? 'unknown'] ?? 0) + 1;
      return {
        agent_id: agent,
        bucket_start: bucketStart,
        count: list.length,
        error_rate: errors.length / list.length,
        by_error_class: byClass,
        latency_ms: pct(list.flatMap((s) => (s.latency === null ? [] : [s.latency]))),
        ttft_ms: pct(list.flatMap((s) => (s.ttft === null ? [] : [s.ttft]))),
      };
    })
    .sort((a, b) =>
      a.bucket_start < b.bucket_start ? -1 : a.bucket_start > b.bucket_start ? 1 : a.agent_id < b.agent_id ? -1 : 1,
    );
}

/** The sketch's guarantee: exact below 128; otherwise within 1/128 of the true nearest-rank value. */
function assertClose(actual: number | null, exact: number | null, what: string): void {
  if (exact === null) return assert.equal(actual, null, `${what}: no samples gives null`);
  assert.equal(typeof actual, 'number', `${what}: a number`);
  if (exact < 128) return assert.equal(actual, exact, `${what}: exact below 128`);
  assert.ok(Math.abs((actual as number) - exact) <= exact / 128, `${what}: ${actual} vs exact ${exact}`);
}

function assertMatches(groups: any[], expected: ReturnType<typeof bruteForce>, label: string): void {
  assert.deepEqual(
    groups.map((g) => `${g.bucket_start}|${g.agent_id}`),
    expected.map((g) => `${g.bucket_start}|${g.agent_id}`),
    `${label}: the same groups in (bucket, agent) order`,
  );
  for (const [i, want] of expected.entries()) {
    const got = groups[i];
    const where = `${label} ${want.bucket_start} ${want.agent_id}`;
    assert.equal(got.count, want.count, `${where}: count`);
    assert.ok(Math.abs(got.error_rate - want.error_rate) < 1e-12, `${where}: error_rate`);
    assert.deepEqual(got.by_error_class, want.by_error_class, `${where}: by_error_class`);
    for (const q of ['p50', 'p95', 'p99'] as const) {
      assertClose(got.latency_ms[q], want.latency_ms[q], `${where}: latency ${q}`);
      assertClose(got.ttft_ms[q], want.ttft_ms[q], `${where}: ttft ${q}`);
    }
  }
}

describe('analytics', () => {
  describe('parameters', () => {
    const since = '2026-10-01T00:00:00Z';
    const cases: Array<[string, number]> = [
      ['', 400],
      ['?until=2026-10-02T00:00:00Z', 400],
      [`?since=`, 400],
      [`?since=yesterday`, 400],
      [`?since=2026-10-01`, 400],
      [`?since=2026-10-01T00:00:00`, 400],
      [`?since=2026-02-30T00:00:00Z`, 400],
      [`?since=1759276800`, 400],
      [`?since=0000-01-01T00:00:00Z&until=0000-01-02T00:00:00Z`, 400],
      [`?since=0001-01-01T00:00:00Z&until=0001-01-02T00:00:00Z`, 200],
      [`?since=9999-12-31T00:00:00Z&until=9999-12-31T23:59:59Z`, 200],
      [`?since=${since}&until=not-a-date`, 400],
      [`?since=${since}&until=2026-09-30T23:59:59Z`, 400],
      [`?since=${since}&until=2026-11-01T00:00:01Z`, 400],
      [`?since=${since}&until=2026-11-01T00:00:00Z`, 200],
      [`?since=${since}&until=${since}`, 200],
      [`?since=${since}&until=2026-10-02T00:00:00Z&group_by=tenant_id`, 400],
      [`?since=${since}&until=2026-10-02T00:00:00Z&group_by=`, 400],
      [`?since=${since}&until=2026-10-02T00:00:00Z&group_by=agent_id`, 200],
      [`?since=${since}&until=2026-10-02T00:00:00Z&group_by=agent_id&group_by=agent_id`, 400],
      [`?since=${since}&until=2026-10-02T00:00:00Z&bucket=week`, 400],
      [`?since=${since}&until=2026-10-02T00:00:00Z&bucket=minute`, 400],
      [`?since=${since}&until=2026-10-02T00:00:00Z&bucket=day`, 200],
      [`?since=${since}&until=2026-10-02T00:00:00Z&bucket=hour`, 200],
      [`?since=2026-10-01T02:00:00%2B02:00&until=2026-10-02T00:00:00.5Z`, 200],
    ];
    for (const [query, status] of cases) {
      it(`GET /v1/analytics${query} → ${status}`, async () => {
        const { token } = await caller();
        const res = await call('GET', `/v1/analytics${query}`, { token });
        assert.equal(res.status, status, res.text);
        if (status === 400) assert.deepEqual(Object.keys(res.json), ['error']);
      });
    }

    it('defaults: bucket hour, until now; answers range, bucket and groups', async () => {
      const { token } = await caller();
      const before = Date.now();
      const res = await call('GET', `/v1/analytics?since=${new Date(before - 3600_000).toISOString()}`, { token });
      assert.equal(res.status, 200);
      assert.equal(res.json.bucket, 'hour');
      assert.deepEqual(res.json.groups, []);
      const after = Date.now();
      const until = Date.parse(res.json.range.until);
      assert.ok(before <= until && until <= after, 'until defaults to the moment of the request');
      assert.deepEqual(Object.keys(res.json).sort(), ['bucket', 'groups', 'range']);
    });

    it('reads an unencoded + offset (decoded as a space) as the + it was, like every endpoint', async () => {
      const { token } = await caller();
      for (const since of [
        '2026-10-01T00:00:00Z',
        '2026-10-01T00:00:00+00:00',
        '2026-10-01T02:00:00+02:00',
        '2026-10-01T02:00:00%2B02:00',
        '2026-10-01%2002:00:00+02:00',
      ]) {
        const res = await call('GET', `/v1/analytics?since=${since}&until=2026-10-02T00:00:00+00:00`, { token });
        assert.equal(res.status, 200, `${since}: ${res.text}`);
        assert.deepEqual(res.json.range, { since: '2026-10-01T00:00:00.000Z', until: '2026-10-02T00:00:00.000Z' });
      }
    });

    it('requires a token', async () => {
      assert.equal((await call('GET', '/v1/analytics?since=2026-10-01T00:00:00Z')).status, 401);
    });
  });

  describe('figures', () => {
    const random = rng(20261122);
    const base = Date.parse('2026-10-01T00:00:00Z');
    let tenant: string;
    let samples: Sample[];
    const classes = ['timeout', 'connect', 'upstream_5xx', 'upstream_4xx', 'circuit_open', 'interrupted'];

    before(async () => {
      ({ tenant } = await caller('ana-fig'));
      const agents = [newId('agt'), newId('agt'), newId('agt')];
      samples = [];
      for (let i = 0; i < 4000; i++) {
        const agent = agents[i % 3];
        // Three days, with a quiet hour or two so some buckets hold a single sample.
        const createdAt = base + Math.floor(random() ** 1.3 * 3 * 86_400_000);
        const roll = random();
        const failed = roll < 0.08;
        const errorClass = failed
          ? classes[Math.floor(random() * 3)]
          : roll < 0.15
            ? classes[2 + Math.floor(random() * 4)]
            : null;
        // Agent 3 answers fast (every value below 128: exact); the others across 1 ms .. 60 s,
        // log-normal, with the odd outlier that moves p99 and nothing else.
        const small = agent === agents[2];
        const latency =
          failed && random() < 0.7
            ? null
            : small
              ? Math.floor(random() * 128)
              : Math.round(Math.exp(4 + random() * 4.5) * (random() < 0.02 ? 20 : 1));
        const ttft = latency === null || random() < 0.1 ? null : Math.floor(latency * random());
        samples.push({ agent, createdAt, status: failed ? 'failed' : 'succeeded', errorClass, latency, ttft });
      }
      // One lonely sample: a group with one value, and another whose only row has no latency.
      samples.push({
        agent: agents[0],
        createdAt: base + 3 * 86_400_000 + 5 * 3600_000,
        status: 'succeeded',
        errorClass: null,
        latency: 4242,
        ttft: 17,
      });
      samples.push({
        agent: agents[1],
        createdAt: base + 3 * 86_400_000 + 6 * 3600_000,
        status: 'failed',
        errorClass: null,
        latency: null,
        ttft: null,
      });
      await insertSamples(tenant, samples);
      // Rows that are not terminal are not counted.
      await stack()
        .orm.em.getConnection()
        .execute(
          `insert into invocations (id, tenant_id, agent_id, mode, status, request_id, caller, created_at) values (?, ?, ?, 'transactional', 'running', 'r', 'u', ?::timestamptz)`,
          [newId('inv'), tenant, agents[0], new Date(base + 3600_000).toISOString()],
        );
    });

    // A user per query: the endpoint's per-caller limit is not what these tests are about.
    let reader = 0;
    const query = async (bucket: string, since = '2026-10-01T00:00:00Z', until = '2026-10-04T23:59:59Z') =>
      call('GET', `/v1/analytics?since=${since}&until=${until}&bucket=${bucket}`, {
        token: await stack().token(tenant, `reader-${(reader += 1)}`),
      });

    it('hourly groups match a brute-force computation over the raw rows', async () => {
      const res = await query('hour');
      assert.equal(res.status, 200);
      assert.equal(res.json.bucket, 'hour');
      assert.deepEqual(res.json.range, { since: '2026-10-01T00:00:00.000Z', until: '2026-10-04T23:59:59.000Z' });
      const expected = bruteForce(samples, 'hour');
      assert.ok(expected.length > 150, 'many hourly groups');
      assertMatches(res.json.groups, expected, 'hour');
      const nothingPaid = { count: 0, amount: '0', uncollected: { count: 0, amount: '0', by_reason: {} } };
      assert.ok(res.json.groups.every((g: any) => JSON.stringify(g.revenue) === JSON.stringify(nothingPaid)));
      const lonely = res.json.groups.find((g: any) => g.bucket_start === '2026-10-04T06:00:00.000Z');
      assert.deepEqual(lonely.latency_ms, { p50: null, p95: null, p99: null });
      assert.equal(lonely.error_rate, 1);
      assert.deepEqual(lonely.by_error_class, { unknown: 1 });
    });

    it('daily groups are true daily percentiles (merged histograms), matching brute force', async () => {
      const res = await query('day');
      assert.equal(res.status, 200);
      const expected = bruteForce(samples, 'day');
      assert.equal(expected.length, 11, 'three agents over three days, two on the fourth');
      assertMatches(res.json.groups, expected, 'day');
      // Not an average of the hourly figures: for at least one group they differ.
      const hourly = (await query('hour')).json.groups;
      const day0 = res.json.groups[0];
      const hours = hourly.filter((g: any) => g.agent_id === day0.agent_id && g.bucket_start.startsWith('2026-10-01'));
      const mean = hours.reduce((s: number, g: any) => s + (g.latency_ms.p95 ?? 0), 0) / hours.length;
      assert.notEqual(Math.round(mean), day0.latency_ms.p95);
    });

    it('includes the whole buckets a window touches, and only those', async () => {
      const res = await query('hour', '2026-10-01T10:30:00Z', '2026-10-01T12:10:00Z');
      const starts = [...new Set(res.json.groups.map((g: any) => g.bucket_start))];
      assert.deepEqual(starts, ['2026-10-01T10:00:00.000Z', '2026-10-01T11:00:00.000Z', '2026-10-01T12:00:00.000Z']);
      const expected = bruteForce(
        samples.filter(
          (s) => s.createdAt >= Date.parse('2026-10-01T10:00:00Z') && s.createdAt < Date.parse('2026-10-01T13:00:00Z'),
        ),
        'hour',
      );
      assertMatches(res.json.groups, expected, 'window');
      const day = await query('day', '2026-10-02T23:00:00Z', '2026-10-03T01:00:00Z');
      assertMatches(
        day.json.groups,
        bruteForce(
          samples.filter(
            (s) =>
              s.createdAt >= Date.parse('2026-10-02T00:00:00Z') && s.createdAt < Date.parse('2026-10-04T00:00:00Z'),
          ),
          'day',
        ),
        'day window',
      );
    });

    it('is tenant-scoped', async () => {
      const other = await caller();
      const res = await call('GET', '/v1/analytics?since=2026-10-01T00:00:00Z&until=2026-10-04T23:59:59Z', {
        token: other.token,
      });
      assert.deepEqual(res.json.groups, []);
    });

    it('caches percentile summaries per hour and per day, and a late completion makes them stale', async () => {
      const conn = stack().orm.em.getConnection();
      const first = { hour: (await query('hour')).json, day: (await query('day')).json };
      // The summaries computed by those reads are written back after the answer.
      const summaries = async () => {
        const [{ n }] = await conn.execute(
          `select count(*)::int as n from analytics_hourly where tenant_id = ? and summary_count is distinct from count`,
          [tenant],
        );
        const [{ d }] = await conn.execute(
          `select count(*)::int as d from analytics_daily_summary where tenant_id = ?`,
          [tenant],
        );
        return { staleHours: n, days: d };
      };
      await waitFor(
        async () => {
          const { staleHours, days } = await summaries();
          return staleHours === 0 && days === 11;
        },
        { everyMs: 100, what: 'the summaries written back', state: async () => JSON.stringify(await summaries()) },
      );
      const [{ n }] = await conn.execute(
        `select count(*)::int as n from analytics_hourly where tenant_id = ? and summary_count is distinct from count`,
        [tenant],
      );
      assert.equal(n, 0, 'every hourly row has a current summary');
      assert.deepEqual((await query('hour')).json, first.hour, 'answers from summaries equal answers from histograms');
      assert.deepEqual((await query('day')).json, first.day);

      // A late completion lands in an hour that already has a summary: a huge latency that
      // moves that hour's and that day's p99.
      const late: Sample = {
        agent: samples[0].agent,
        createdAt: Date.parse('2026-10-01T07:42:00Z'),
        status: 'succeeded',
        errorClass: null,
        latency: 9_000_000,
        ttft: 5,
      };
      samples.push(late);
      await insertSamples(tenant, [late]);
      const hour = await query('hour');
      assertMatches(hour.json.groups, bruteForce(samples, 'hour'), 'hour after a late completion');
      const day = await query('day');
      assertMatches(day.json.groups, bruteForce(samples, 'day'), 'day after a late completion');
      const changed = hour.json.groups.find(
        (g: any) => g.bucket_start === '2026-10-01T07:00:00.000Z' && g.agent_id === late.agent,
      );
      assert.ok(changed.latency_ms.p99 > 8_900_000 || changed.count < 100, 'the stale summary was not used');
    });

    it('the rebuild function (backfill, repair) produces exactly what the fold rolled up', async () => {
      const conn = stack().orm.em.getConnection();
      const snapshot = () =>
        conn.execute(
          `select agent_id, bucket_start, count, errors, by_error_class, latency, ttft, paid, revenue, uncollected, uncollected_amount
             from analytics_hourly where tenant_id = ? order by bucket_start, agent_id`,
          [tenant],
        );
      const before = await snapshot();
      await conn.execute(`select analytics_rebuild(?)`, [tenant]);
      assert.deepEqual(await snapshot(), before);
    });

    it('the background round summarizes closed hours and days from their histograms as a read would', async () => {
      const conn = stack().orm.em.getConnection();
      // Answers computed by the reader from the histograms, every summary forgotten.
      await conn.execute(`update analytics_hourly set summary = null, summary_count = null where tenant_id = ?`, [
        tenant,
      ]);
      await conn.execute(`delete from analytics_daily_summary where tenant_id = ?`, [tenant]);
      const fromHistograms = { hour: (await query('hour')).json, day: (await query('day')).json };
      // Those reads write their summaries back after answering: wait for them, then forget them again.
      await waitFor(
        async () => {
          const [{ n, d }] = await conn.execute(
            `select (select count(*) from analytics_hourly where tenant_id = ? and summary_count is distinct from count)::int as n,
                    (select count(*) from analytics_daily_summary where tenant_id = ?)::int as d`,
            [tenant, tenant],
          );
          return n === 0 && d === 11;
        },
        { what: 'the reads to write their summaries back' },
      );
      await conn.execute(`update analytics_hourly set summary = null, summary_count = null where tenant_id = ?`, [
        tenant,
      ]);
      await conn.execute(`delete from analytics_daily_summary where tenant_id = ?`, [tenant]);
      // A round as of 2026-10-04 12:30: the window reaches back two days from 12:00.
      const hours = await summarizeClosedBuckets(stack().orm, Date.parse('2026-10-04T12:30:00Z'));
      assert.ok(hours > 0);
      const [{ summarized, open }] = await conn.execute(
        `select count(*) filter (where summary_count = count)::int as summarized,
                count(*) filter (where summary_count is distinct from count and bucket_start >= '2026-10-02T12:00:00Z' and bucket_start < '2026-10-04T12:00:00Z')::int as open
           from analytics_hourly where tenant_id = ?`,
        [tenant],
      );
      assert.equal(summarized, hours);
      assert.equal(open, 0, 'every closed hour of the window is summarized');
      const days = await conn.execute(
        `select (extract(epoch from day) * 1000)::bigint as day_ms from analytics_daily_summary where tenant_id = ? group by 1 order by 1`,
        [tenant],
      );
      // The closed days of the window (2 and 3 October); the current one stays with the reader.
      assert.deepEqual(
        days.map((d: any) => new Date(Number(d.day_ms)).toISOString()),
        ['2026-10-02T00:00:00.000Z', '2026-10-03T00:00:00.000Z'],
      );
      assert.deepEqual((await query('hour')).json, fromHistograms.hour);
      assert.deepEqual((await query('day')).json, fromHistograms.day);
      // The days outside the window were computed by that read: its write-back lands before the next test.
      await waitFor(
        async () => {
          const [{ d }] = await conn.execute(
            `select count(*)::int as d from analytics_daily_summary where tenant_id = ?`,
            [tenant],
          );
          return d === 11;
        },
        { what: 'the read to write its day summaries back' },
      );
    });

    it('the rebuild leaves every summary current, equal to the ones computed from the histograms', async () => {
      const conn = stack().orm.em.getConnection();
      await conn.execute(`select analytics_rebuild(?)`, [tenant]);
      const [{ n }] = await conn.execute(
        `select count(*)::int as n from analytics_hourly where tenant_id = ? and summary_count is distinct from count`,
        [tenant],
      );
      assert.equal(n, 0, 'every hourly row has a current summary');
      const [{ d }] = await conn.execute(`select count(*)::int as d from analytics_daily_summary where tenant_id = ?`, [
        tenant,
      ]);
      assert.equal(d, 11, 'every agent-day has a summary');
      const fromRebuild = { hour: (await query('hour')).json, day: (await query('day')).json };
      assertMatches(fromRebuild.hour.groups, bruteForce(samples, 'hour'), 'hourly groups after a rebuild');
      assertMatches(fromRebuild.day.groups, bruteForce(samples, 'day'), 'daily groups after a rebuild');
      // The same answers computed by the reader from the histograms, with every summary forgotten.
      await conn.execute(`update analytics_hourly set summary = null, summary_count = null where tenant_id = ?`, [
        tenant,
      ]);
      await conn.execute(`delete from analytics_daily_summary where tenant_id = ?`, [tenant]);
      assert.deepEqual((await query('hour')).json, fromRebuild.hour);
      assert.deepEqual((await query('day')).json, fromRebuild.day);
    });
  });

  describe('live path', () => {
    let upstream: TestUpstream;
    before(async () => {
      upstream = await startUpstream((req, res) => {
        if (req.body.toString() === 'fail') {
          res.statusCode = 500;
          return res.end('no');
        }
        res.end('ok');
      });
    });
    after(() => upstream.close());

    it('folds a real invocation in once it completes: count, errors, latency and TTFT', async () => {
      const { token } = await caller();
      const since = new Date(Date.now() - 60_000).toISOString();
      const created = await call('POST', '/v1/agents', {
        token,
        json: { name: uniqueName('ana'), upstream_url: upstream.url },
      });
      const agentId = created.json.id;
      const done = [];
      for (const body of ['a', 'b', 'fail']) {
        const inv = await call('POST', `/v1/proxy/${agentId}`, { token, body });
        assert.equal(inv.status, 202);
        done.push(await waitForInvocation(token, agentId, inv.json.invocation_id));
      }
      await analyticsCaughtUp();
      const res = await call('GET', `/v1/analytics?since=${since}`, { token });
      assert.equal(res.status, 200);
      const mine = res.json.groups.filter((g: any) => g.agent_id === agentId);
      assert.equal(
        mine.reduce((s: number, g: any) => s + g.count, 0),
        3,
      );
      const errors = mine.reduce((s: number, g: any) => s + (g.by_error_class.upstream_5xx ?? 0), 0);
      assert.equal(errors, 1, 'the 500 answer is counted as upstream_5xx');
      if (mine.length === 1) {
        const [g] = mine;
        assert.ok(Math.abs(g.error_rate - 1 / 3) < 1e-12);
        const latencies = done.map((d) => d.latency_ms).sort((a, b) => a - b);
        assertClose(g.latency_ms.p50, exactPercentile(latencies, 0.5), 'live latency p50');
        assertClose(g.latency_ms.p99, exactPercentile(latencies, 0.99), 'live latency p99');
        assert.equal(typeof g.ttft_ms.p50, 'number');
      }
    });
  });

  describe('rate limit', () => {
    it('answers 429 with Retry-After once the caller spends its burst; other callers are unaffected', async () => {
      const { tenant, token } = await caller();
      const url = '/v1/analytics?since=2026-10-01T00:00:00Z&until=2026-10-01T01:00:00Z';
      const statuses: number[] = [];
      let limited;
      for (let i = 0; i < 40; i++) {
        const res = await call('GET', url, { token });
        statuses.push(res.status);
        if (res.status === 429) {
          limited = res;
          break;
        }
      }
      assert.ok(limited, `a 429 within 40 calls (got ${statuses.join(',')})`);
      assert.equal(statuses.length, stack().config.analytics.burst + 1, 'exactly the burst passes');
      const retryAfter = Number(limited.headers['retry-after']);
      assert.ok(
        Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60,
        `Retry-After ${limited.headers['retry-after']}`,
      );
      assert.equal(typeof limited.json.error, 'string');
      // Another user of the same tenant has a bucket of its own.
      const other = await stack().token(tenant, 'someone-else');
      assert.equal((await call('GET', url, { token: other })).status, 200);
      // Bad parameters spend tokens too: still 429, not 400.
      assert.equal((await call('GET', '/v1/analytics', { token })).status, 429);
    });
  });
});

describe('analytics per caller (GET /v1/analytics/callers)', () => {
  const day = Date.parse('2026-10-05T00:00:00Z');
  const payer = 'x402:0x1111111111111111111111111111111111111111';
  const otherPayer = 'x402:0x2222222222222222222222222222222222222222';

  /** Terminal invocation rows as the gateway writes them, with their caller and its kind. */
  async function insertCalls(
    tenant: string,
    rows: Array<{
      caller: string;
      kind: 'token' | 'x402';
      agent: string;
      at: number;
      status: string;
      errorClass: string | null;
    }>,
  ): Promise<void> {
    const values = rows.flatMap((r) => [
      newId('inv'),
      tenant,
      r.agent,
      r.status,
      r.caller,
      r.kind,
      r.errorClass,
      new Date(r.at).toISOString(),
    ]);
    await stack()
      .orm.em.getConnection()
      .execute(
        `insert into invocations (id, tenant_id, agent_id, mode, status, request_id, caller, caller_kind, error_class, created_at, attempts)
         values ${rows.map(() => `(?, ?, ?, 'transactional', ?, 'req', ?, ?, ?, ?::timestamptz, 1)`).join(', ')}`,
        values,
      );
  }

  it("groups a public agent's payers apart from the tenant's token users, per agent and bucket", async () => {
    const { tenant, token } = await caller('ana-callers');
    const [agent, other] = [newId('agt'), newId('agt')];
    const at = (minutes: number) => day + minutes * 60_000;
    await insertCalls(tenant, [
      { caller: payer, kind: 'x402', agent, at: at(1), status: 'succeeded', errorClass: null },
      { caller: payer, kind: 'x402', agent, at: at(2), status: 'failed', errorClass: 'timeout' },
      { caller: payer, kind: 'x402', agent, at: at(3), status: 'failed', errorClass: null },
      { caller: otherPayer, kind: 'x402', agent, at: at(4), status: 'succeeded', errorClass: null },
      { caller: 'user-a', kind: 'token', agent, at: at(5), status: 'succeeded', errorClass: null },
      { caller: 'user-a', kind: 'token', agent: other, at: at(61), status: 'succeeded', errorClass: 'upstream_4xx' },
      // Not terminal: not counted.
      { caller: payer, kind: 'x402', agent, at: at(6), status: 'running', errorClass: null },
    ]);
    const since = new Date(day).toISOString();
    const until = new Date(day + 3 * 3600_000).toISOString();
    const res = await call('GET', `/v1/analytics/callers?since=${since}&until=${until}`, { token });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.truncated, false);
    const hour = new Date(day).toISOString();
    const next = new Date(day + 3600_000).toISOString();
    assert.deepEqual(res.json.groups, [
      {
        user_id: 'user-a',
        caller_kind: 'token',
        agent_id: agent,
        bucket_start: hour,
        count: 1,
        error_rate: 0,
        by_error_class: {},
      },
      {
        user_id: payer,
        caller_kind: 'x402',
        agent_id: agent,
        bucket_start: hour,
        count: 3,
        error_rate: 2 / 3,
        by_error_class: { timeout: 1, unknown: 1 },
      },
      {
        user_id: otherPayer,
        caller_kind: 'x402',
        agent_id: agent,
        bucket_start: hour,
        count: 1,
        error_rate: 0,
        by_error_class: {},
      },
      {
        user_id: 'user-a',
        caller_kind: 'token',
        agent_id: other,
        bucket_start: next,
        count: 1,
        error_rate: 1,
        by_error_class: { upstream_4xx: 1 },
      },
    ]);

    // Only the payers, by day, for one agent.
    const payers = await call(
      'GET',
      `/v1/analytics/callers?since=${since}&until=${until}&bucket=day&caller_kind=x402&agent_id=${agent}`,
      { token },
    );
    assert.equal(payers.status, 200, payers.text);
    assert.deepEqual(
      payers.json.groups.map((g: any) => [g.user_id, g.count]),
      [
        [payer, 3],
        [otherPayer, 1],
      ],
    );

    // Another tenant sees none of it; the per-agent endpoint keeps refusing group_by values other than agent_id.
    const stranger = await caller('ana-callers');
    const none = await call('GET', `/v1/analytics/callers?since=${since}&until=${until}`, { token: stranger.token });
    assert.deepEqual(none.json.groups, []);
    assert.equal((await call('GET', `/v1/analytics?since=${since}&group_by=user_id`, { token })).status, 400);
  });

  it('takes the window rules of /v1/analytics, and refuses an unknown caller_kind', async () => {
    const { token } = await caller();
    for (const [query, status] of [
      ['', 400],
      ['?since=2026-10-01T00:00:00Z&until=2026-11-02T00:00:00Z', 400],
      ['?since=2026-10-02T00:00:00Z&until=2026-10-01T00:00:00Z', 400],
      ['?since=2026-10-01T00:00:00Z&until=2026-10-02T00:00:00Z&caller_kind=anyone', 400],
      ['?since=2026-10-01T00:00:00Z&until=2026-10-02T00:00:00Z&bucket=week', 400],
      ['?since=2026-10-01T00:00:00Z&until=2026-10-02T00:00:00Z&caller_kind=token&bucket=day', 200],
    ] as const) {
      const res = await call('GET', `/v1/analytics/callers${query}`, { token });
      assert.equal(res.status, status, `${query}: ${res.text}`);
    }
    assert.equal((await call('GET', '/v1/analytics/callers?since=2026-10-01T00:00:00Z')).status, 401);
  });
});
