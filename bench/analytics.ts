// `npm run bench:analytics [-- --invocations N --agents N --runs N --keep]`
//
// Seeds one tenant with N invocations (default one million) spread evenly over 31 days and
// several agents, in a fresh database, then times GET /v1/analytics through the real API
// (HTTP, auth, limiter, rollup query, percentile shaping, JSON) for the 31-day hourly and
// daily windows. Also measured: what the analytics fold costs per completed invocation (the
// fold stamp on the insert, and folding the row), and the baseline the rollups replace (exact
// percentiles computed from the raw rows).
//
// PostgreSQL: DATABASE_URL's server, else the local one on 127.0.0.1:5432, else an embedded
// one under .data/bench. The bench database is dropped at the end unless --keep.
// `npm run bench` (bench/run.ts) calls runAnalyticsBench and puts its result in docs/BENCHMARKS.md.
import { randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { Client } from '@temporalio/client';
import { openOrm, migrate } from '../gateway/db/orm.ts';
import { loadGatewayConfig } from '../gateway/config.ts';
import { startGateway } from '../api/wiring.ts';
import { createLogger } from '../lib/log.ts';
import { mintToken } from '../scripts/lib/tokens.ts';
import {
  canConnect,
  dropDatabase,
  ensureDatabase,
  startEmbeddedPostgres,
  withDatabase,
} from '../scripts/lib/postgres.ts';
import { freePort } from '../scripts/lib/ports.ts';
import { startStep, timedStep, type Step } from '../scripts/lib/progress.ts';
import { cpuCell, cpuPerUnit, type CpuGroups } from './cpu.ts';
import { databaseBackends, type DatabaseBackends } from './database-cpu.ts';
import { finishResult, runAsMain, startResult, tableLines, type BenchResult, percentile } from './result.ts';
import { parseCommand } from '../scripts/lib/cli.ts';

const USAGE = `usage: npm run bench:analytics [-- --invocations N --agents N --runs N --keep --json FILE]
  The analytics benchmark: N invocations (default one million) over 31 days, GET /v1/analytics
  timed for 31-day windows (docs/BENCHMARKS.md, "Analytics"); --json writes the result to FILE.`;

const TENANT = 'bench-tenant';
const SINCE = '2026-09-01T00:00:00Z';
const UNTIL = '2026-10-02T00:00:00Z'; // exactly 31 days later

const say = (line: string) => process.stdout.write(line + '\n');
const ms = (t0: number) => performance.now() - t0;

async function serverUrl(): Promise<{ url: string; stop(): Promise<void> }> {
  if (process.env.DATABASE_URL) return { url: process.env.DATABASE_URL, stop: async () => undefined };
  const local = 'postgres://postgres@127.0.0.1:5432/postgres';
  if (await canConnect(local)) return { url: local, stop: async () => undefined };
  const pg = await startEmbeddedPostgres(resolve('.data/bench'), await freePort(), () => undefined);
  return { url: pg.baseUrl, stop: pg.stop };
}

/** One INSERT … SELECT of invocation rows: log-normal latencies (≈ 30 ms .. 2 s), 3 % failed, 5 % 4xx/5xx answers. */
function seedSql(tenant: string, from: number, to: number, total: number, AGENTS: number): string {
  return `
    insert into invocations (id, tenant_id, agent_id, mode, status, request_id, caller, latency_ms, ttft_ms, error_class, created_at, completed_at, attempts)
    select 'inv_bench_' || g, '${tenant}', 'agt_bench_' || (g % ${AGENTS}), 'transactional',
      case when r1 < 0.03 then 'failed' else 'succeeded' end, 'bench', 'bench',
      case when r1 < 0.02 then null else exp(3.5 + r2 * 4)::bigint end,
      case when r1 < 0.02 or r3 < 0.05 then null else (exp(3.5 + r2 * 4) * r3)::bigint end,
      case when r1 < 0.02 then 'timeout' when r1 < 0.03 then 'connect' when r1 < 0.06 then 'upstream_5xx' when r1 < 0.08 then 'upstream_4xx' end,
      timestamptz '${SINCE}' + ((g - 1)::float8 / ${total}) * interval '31 days', now(), 1
    from (select g, random() as r1, random() as r2, random() as r3 from generate_series(${from}, ${to}) as g) as s`;
}

export async function runAnalyticsBench(argv: string[] = []): Promise<BenchResult> {
  const startedMs = performance.now();
  const { values: args } = parseCommand({
    usage: USAGE,
    args: argv,
    options: {
      invocations: { type: 'string', default: '1000000' },
      agents: { type: 'string', default: '10' },
      runs: { type: 'string', default: '30' },
      keep: { type: 'boolean', default: false },
    },
  });
  const N = Number(args.invocations);
  const AGENTS = Number(args.agents);
  const RUNS = Number(args.runs);
  const setup = `${N.toLocaleString('en')} invocations, ${AGENTS} agents, 31 days, ${RUNS} timed requests per query`;
  const result = startResult(
    'analytics',
    `npm run bench:analytics -- ${argv.join(' ')}`.trim().replace(/ --$/, ''),
    setup,
  );
  const server = await serverUrl();
  const dbUrl = withDatabase(server.url, `gw_bench_analytics_${process.pid}`);
  await ensureDatabase(dbUrl);
  const orm = await openOrm(dbUrl);
  const conn = orm.em.getConnection();
  let api: import('node:http').Server | undefined;
  let database: DatabaseBackends | undefined;
  try {
    await migrate(orm);
    say(`# analytics benchmark: ${setup}`);

    // Seeding: bulk rows, then one rebuild (the same function the migrations backfill with,
    // tested to equal the fold's result), which also folds them as of its snapshot.
    const seeding = startStep('analytics: seeding', `${N.toLocaleString('en')} invocations, 100,000 per statement`);
    let t0 = performance.now();
    for (let from = 1; from <= N; from += 100_000) {
      await conn.execute(seedSql(TENANT, from, Math.min(N, from + 99_999), N, AGENTS));
      seeding.progress(Math.min(N, from + 99_999), N, 'rows');
    }
    const seeded = ms(t0);
    seeding.end();
    const rebuilding = startStep('analytics: rebuilding the rollups', 'then vacuum analyze');
    t0 = performance.now();
    await conn.execute(`select analytics_rebuild(?)`, [TENANT]);
    const rebuilt = ms(t0);
    await conn.execute('vacuum analyze analytics_hourly');
    await conn.execute('vacuum analyze invocations');
    // The bulk load's dirty pages written out now, not by a checkpoint during the timed reads
    // (at ten million rows that is gigabytes). Needs the right to checkpoint; skipped without it.
    await conn.execute('checkpoint').catch(() => undefined);
    rebuilding.end();
    const [{ rows, keys }] = await conn.execute(
      `select count(*)::int as rows, sum((select count(*) from jsonb_object_keys(latency)) + (select count(*) from jsonb_object_keys(ttft)))::int as keys from analytics_hourly where tenant_id = ?`,
      [TENANT],
    );
    result.notes.push(
      `seeded in ${(seeded / 1000).toFixed(1)} s; rollups rebuilt in ${(rebuilt / 1000).toFixed(1)} s: ${rows} hourly rows, ${keys} histogram buckets`,
    );
    say(result.notes.at(-1)!);

    // What the fold costs a completed invocation: the same 20 000 rows inserted without the fold's
    // stamp and with it, then folded in one round.
    const sample = 20_000;
    const foldCost = startStep(
      'analytics: fold cost',
      `${sample.toLocaleString('en')} rows without the stamp, with it, folded`,
    );
    await conn.execute('alter table invocations alter column analytics_xid drop default');
    t0 = performance.now();
    await conn.execute(seedSql('bench-off', 1, sample, sample, AGENTS).replace(/'inv_bench_'/, `'inv_off_'`));
    const without = ms(t0);
    await conn.execute('alter table invocations alter column analytics_xid set default pg_current_xact_id()');
    t0 = performance.now();
    await conn.execute(seedSql('bench-on', 1, sample, sample, AGENTS).replace(/'inv_bench_'/, `'inv_on_'`));
    const stamped = ms(t0);
    t0 = performance.now();
    await conn.execute('select analytics_fold(true)');
    const folded = ms(t0);
    const stampUs = ((stamped - without) * 1000) / sample;
    const foldUs = (folded * 1000) / sample;
    foldCost.end();
    result.notes.push(
      `analytics fold: ${stampUs.toFixed(0)} µs of database time per completed invocation for the stamp (${sample} rows: ${without.toFixed(0)} ms without, ${stamped.toFixed(0)} ms with), ${foldUs.toFixed(0)} µs to fold it (${folded.toFixed(0)} ms for the round)`,
    );
    say(result.notes.at(-1)!);

    // The API, in-process, on the bench database. Temporal is never reached by this endpoint
    // (the client connects lazily); the limiter is opened wide so it measures the query.
    const secret = randomBytes(32).toString('hex');
    const config = loadGatewayConfig({
      PORT: '0',
      DATABASE_URL: dbUrl,
      AUTH_JWT_SECRET: secret,
      LOG_LEVEL: 'silent',
      ANALYTICS_RATE_PER_MIN: '1000000',
      ANALYTICS_RATE_BURST: '1000000',
      RECEIPT_KEYS_DIR: resolve('.data/bench/receipt-keys'),
    });
    api = await startGateway(config, orm, new Client(), createLogger('bench', 'silent'));
    const base = `http://127.0.0.1:${(api.address() as AddressInfo).port}`;
    const token = await mintToken({ secret, tenant: TENANT, user: 'bench' });
    // CPU per request by process: the API runs in this process, beside its HTTP client.
    database = await databaseBackends(dbUrl);
    const cpuGroups: CpuGroups = {
      'this process: the API (in-process) and its client': () => [process.pid],
      'PostgreSQL (bench database backends)': database.pids,
    };

    const timeQuery = (bucket: 'hour' | 'day') =>
      timedStep(
        `analytics: timing the ${bucket === 'hour' ? 'hourly' : 'daily'} query`,
        `${RUNS} requests after a cold one and 3 warm-ups`,
        (step) => timeQueryRuns(bucket, step),
      );
    async function timeQueryRuns(bucket: 'hour' | 'day', step: Step) {
      const url = `${base}/v1/analytics?since=${SINCE}&until=${UNTIL}&bucket=${bucket}`;
      const once = async () => {
        const start = performance.now();
        const res = await request(url, { headers: { authorization: `Bearer ${token}` } });
        const text = await res.body.text();
        const took = ms(start);
        if (res.statusCode !== 200) throw new Error(`analytics answered ${res.statusCode}: ${text}`);
        return { took, bytes: text.length, body: JSON.parse(text) as { groups: Array<{ count: number }> } };
      };
      // Cold: the first read after the API started, on the rollups just rebuilt (which leave
      // every summary current); a read that finds summaries stale computes them from the
      // histograms and writes them back after answering. Then wait for that to land.
      const cold = (await once()).took;
      const pending =
        bucket === 'hour'
          ? `select count(*)::int as n from analytics_hourly where tenant_id = ? and summary_count is distinct from count`
          : `select (select count(distinct (agent_id, date_trunc('day', bucket_start, 'UTC'))) from analytics_hourly where tenant_id = ?) - (select count(*) from analytics_daily_summary where tenant_id = ?) as n`;
      for (let i = 0; i < 300; i++) {
        const [{ n }] = await conn.execute(pending, bucket === 'hour' ? [TENANT] : [TENANT, TENANT]);
        if (Number(n) === 0) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      for (let i = 0; i < 3; i++) await once();
      const times: number[] = [];
      let last: Awaited<ReturnType<typeof once>> | undefined;
      const cpu = await cpuPerUnit(cpuGroups, RUNS, async () => {
        for (let i = 0; i < RUNS; i++) {
          last = await once();
          times.push(last.took);
          step.progress(i + 1, RUNS, 'requests');
        }
      });
      const total = last!.body.groups.reduce((s, g) => s + g.count, 0);
      if (total !== N) throw new Error(`the ${bucket} groups add up to ${total}, not ${N}`);
      return {
        cold,
        p50: percentile(times, 0.5),
        p95: percentile(times, 0.95),
        max: Math.max(...times),
        groups: last!.body.groups.length,
        bytes: last!.bytes,
        cpu,
      };
    }

    const hour = await timeQuery('hour');
    const day = await timeQuery('day');

    // Baseline: the same figures computed exactly from the raw rows on every request.
    const baselineSql = `
      select agent_id, date_trunc('hour', created_at, 'UTC') as b, count(*),
             count(*) filter (where status = 'failed' or error_class is not null) as errors,
             percentile_disc(array[0.5, 0.95, 0.99]) within group (order by latency_ms) as latency,
             percentile_disc(array[0.5, 0.95, 0.99]) within group (order by ttft_ms) as ttft
      from invocations where tenant_id = ? and created_at >= ?::timestamptz and created_at < ?::timestamptz
        and status in ('succeeded', 'failed')
      group by 1, 2`;
    const baseTimes: number[] = [];
    const baseline = startStep('analytics: baseline', '3 exact queries over the raw rows');
    const baselineCpu = await cpuPerUnit(cpuGroups, 3, async () => {
      for (let i = 0; i < 3; i++) {
        const start = performance.now();
        await conn.execute(baselineSql, [TENANT, SINCE, UNTIL]);
        baseTimes.push(ms(start));
      }
    });
    baseline.end();

    const table = {
      title: 'GET /v1/analytics, 31 days',
      header: ['query (31 days)', 'groups', 'response', 'cold (first read)', 'p50', 'p95', 'max'],
      rows: [] as string[][],
    };
    for (const [name, r] of [
      ['hourly', hour],
      ['daily', day],
    ] as const) {
      table.rows.push([
        name,
        String(r.groups),
        `${(r.bytes / 1024).toFixed(0)} KiB`,
        `${r.cold.toFixed(0)} ms`,
        `${r.p50.toFixed(1)} ms`,
        `${r.p95.toFixed(1)} ms`,
        `${r.max.toFixed(1)} ms`,
      ]);
    }
    table.rows.push([
      'baseline: hourly, exact, from the raw rows (SQL percentile_disc; no HTTP)',
      String(hour.groups),
      '',
      '',
      `${percentile(baseTimes, 0.5).toFixed(0)} ms`,
      '',
      `${Math.max(...baseTimes).toFixed(0)} ms`,
    ]);
    result.tables.push(table);
    say('');
    for (const line of tableLines(table)) say(line);
    say('');
    say(`target: 31-day hourly p50 < 300 ms: ${hour.p50 < 300 ? 'met' : 'NOT met'} (${hour.p50.toFixed(1)} ms)`);
    say(
      `target: 31-day hourly cold read < 200 ms: ${hour.cold < 200 ? 'met' : 'NOT met'} (${hour.cold.toFixed(0)} ms)`,
    );
    const cpuTable = {
      title: `CPU per request, by process (ms; user + system while the timed requests ran, counted by /proc in 10 ms ticks: over ${RUNS} reads, and over 3 baseline queries)`,
      header: ['process', 'hourly read', 'daily read', 'baseline: hourly from the raw rows'],
      rows: Object.keys(cpuGroups).map((name) => [
        name,
        cpuCell(hour.cpu.get(name), 1),
        cpuCell(day.cpu.get(name), 1),
        cpuCell(baselineCpu.get(name), 0),
      ]),
    };
    result.tables.push(cpuTable);
    say('');
    for (const line of tableLines(cpuTable)) say(line);
    const baseP50 = percentile(baseTimes, 0.5);
    result.checks.push(
      {
        figure: '31-day hourly query p50',
        measured: `${hour.p50.toFixed(1)} ms`,
        baseline: `raw rows ${baseP50.toFixed(0)} ms`,
        ratio: `${(hour.p50 / baseP50).toFixed(3)}×`,
        target: '< 300 ms',
        pass: hour.p50 < 300,
      },
      {
        figure: '31-day hourly query, cold (first read of a fresh API process)',
        measured: `${hour.cold.toFixed(0)} ms`,
        baseline: `warm p50 ${hour.p50.toFixed(1)} ms`,
        ratio: `${(hour.cold / hour.p50).toFixed(2)}×`,
        target: '< 200 ms',
        pass: hour.cold < 200,
      },
      {
        figure: '31-day daily query p50',
        measured: `${day.p50.toFixed(1)} ms`,
        baseline: `raw rows (hourly) ${baseP50.toFixed(0)} ms`,
        ratio: `${(day.p50 / baseP50).toFixed(3)}×`,
        target: '(none)',
        pass: null,
      },
    );
    say(
      JSON.stringify({
        bench: 'analytics',
        invocations: N,
        agents: AGENTS,
        runs: RUNS,
        hourly: { ...hour, cpu: Object.fromEntries(hour.cpu) },
        daily: { ...day, cpu: Object.fromEntries(day.cpu) },
        baselineMs: baseTimes,
        foldStampUsPerRow: stampUs,
        foldUsPerRow: foldUs,
      }),
    );
  } finally {
    await database?.end().catch(() => undefined);
    if (api) await new Promise((r) => api!.close(r));
    await orm.close();
    if (!args.keep) await dropDatabase(dbUrl).catch(() => undefined);
    await server.stop();
  }
  return finishResult(result, startedMs);
}

if (import.meta.main) await runAsMain(runAnalyticsBench);
