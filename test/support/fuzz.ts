// The property-based test runner of the hostile-input tests (test/fuzz/fuzz-*.test.ts). Cases are
// drawn with fast-check from one seed per run (FC_SEED, printed; a default keeps CI
// reproducible), each property with its own seed derived from the run's seed and its name so
// adding a property never shifts the cases of another. Cases run over keep-alive connections
// with modest concurrency (lanes); a failure reports the seed, the case number and the input,
// so `FC_SEED=<seed> npx mocha test/<file>` replays it exactly.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fc from 'fast-check';
import { Pool, type Dispatcher } from 'undici';
import { parseJson, type Reply } from './http.ts';
import { startCapturedGateway, type ExtraGateway } from './catalog.ts';
import { startUpstream, type TestUpstream } from './upstream.ts';

const DEFAULT_SEED = 20_261_122;

/** The run's seed: FC_SEED when set, else a fixed default (test/fuzz/schemathesis.test.ts seeds with it too). */
export const FUZZ_SEED =
  process.env.FC_SEED !== undefined && process.env.FC_SEED !== '' ? Number(process.env.FC_SEED) : DEFAULT_SEED;
if (!Number.isSafeInteger(FUZZ_SEED)) throw new Error(`FC_SEED must be an integer, got ${process.env.FC_SEED}`);

/** FC_SCALE multiplies every property's case count (e.g. 0.1 while iterating, 10 for a long soak). */
export const FUZZ_SCALE = process.env.FC_SCALE ? Number(process.env.FC_SCALE) : 1;

/** Lanes that run cases at once: enough to overlap I/O, few enough for a 2-core CI machine. */
const FUZZ_CONCURRENCY = Number(process.env.FC_CONCURRENCY ?? 6);

let announced = false;
const tally: Array<{ name: string; cases: number; ms: number }> = [];

function announce(): void {
  if (announced) return;
  announced = true;
  console.log(`      fast-check seed ${FUZZ_SEED} (set FC_SEED=<n> to replay or vary; FC_SCALE=${FUZZ_SCALE})`);
  process.once('exit', () => {
    const cases = tally.reduce((n, t) => n + t.cases, 0);
    const ms = tally.reduce((n, t) => n + t.ms, 0);
    console.log(
      `fuzz: ${cases} generated cases over ${tally.length} properties in ${(ms / 1000).toFixed(1)} s (seed ${FUZZ_SEED})`,
    );
  });
}

/** The property's own seed: the run's seed mixed with its name. */
function seedFor(name: string): number {
  const h = createHash('sha256').update(`${FUZZ_SEED}:${name}`).digest();
  return h.readInt32BE(0);
}

function scaled(n: number): number {
  return Math.max(1, Math.round(n * FUZZ_SCALE));
}

export type CaseContext = { index: number; lane: number };

/**
 * Draws `numRuns` inputs of `arb` from the property's seed and checks each, `concurrency`
 * at a time. A lane keeps its number for its whole life, so a check can keep per-lane state
 * (one resource per lane, mutated by that lane only). Stops at the first failures and throws
 * one error naming the seed, the case and the input.
 */
export async function forAllCases<T>(
  name: string,
  arb: fc.Arbitrary<T>,
  numRuns: number,
  check: (input: T, ctx: CaseContext) => Promise<void>,
  opts: { concurrency?: number; examples?: T[] } = {},
): Promise<number> {
  announce();
  const seed = seedFor(name);
  // Known regressions first (whatever the seed), then the generated cases.
  const inputs = [...(opts.examples ?? []), ...fc.sample(arb, { seed, numRuns: scaled(numRuns) })];
  const runs = inputs.length;
  const concurrency = Math.min(opts.concurrency ?? FUZZ_CONCURRENCY, runs);
  const failures: Array<{ index: number; input: T; error: Error }> = [];
  const started = performance.now();
  let next = 0;
  let done = 0;
  async function lane(laneNo: number): Promise<void> {
    while (next < inputs.length && failures.length === 0) {
      const index = next++;
      try {
        await check(inputs[index], { index, lane: laneNo });
        done += 1;
      } catch (error) {
        failures.push({ index, input: inputs[index], error: error as Error });
      }
    }
  }
  await Promise.all(Array.from({ length: concurrency }, (_, i) => lane(i)));
  tally.push({ name, cases: done, ms: performance.now() - started });
  if (failures.length > 0) {
    const f = failures[0];
    throw new Error(
      `property "${name}" failed on case #${f.index} of ${runs} (FC_SEED=${FUZZ_SEED}): ${f.error.message}\n  input: ${show(f.input)}`,
      { cause: f.error },
    );
  }
  return done;
}

export function show(value: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(value, (_k, v) =>
      typeof v === 'bigint' ? `${v}n` : Buffer.isBuffer(v) ? `<buffer ${v.toString('base64')}>` : v,
    );
  } catch {
    text = String(value);
  }
  return text === undefined ? String(value) : text.length > 3000 ? `${text.slice(0, 3000)}…` : text;
}

type FuzzRequest = {
  token?: string;
  json?: unknown;
  body?: string | Buffer;
  headers?: Record<string, string>;
};

export type FuzzClient = {
  send(method: string, path: string, req?: FuzzRequest): Promise<Reply>;
  close(): Promise<void>;
};

/** An HTTP client with its own keep-alive pool to one origin (never one connection per case). */
function fuzzClient(origin: string, opts: { connections?: number; dispatcher?: Dispatcher } = {}): FuzzClient {
  const pool =
    opts.dispatcher ??
    new Pool(origin, { connections: opts.connections ?? FUZZ_CONCURRENCY * 2, keepAliveTimeout: 30_000 });
  return {
    async send(method, path, req = {}) {
      const headers: Record<string, string> = { ...req.headers };
      if (req.token) headers.authorization = `Bearer ${req.token}`;
      let body = req.body;
      if (req.json !== undefined) {
        headers['content-type'] ??= 'application/json';
        body = JSON.stringify(req.json);
      }
      const res = await pool.request({ origin, method: method as 'GET', path, headers, body });
      const text = await res.body.text();
      return { status: res.statusCode, headers: res.headers, text, json: parseJson(text) };
    },
    close: () => pool.close(),
  };
}

/**
 * The answer is one the v1 contract's tables allow for this endpoint: never 5xx; a 4xx carries
 * exactly `{error: string}` (401 carries nothing).
 */
export function assertSpecAnswer(
  res: Reply,
  allowed: readonly number[],
  what: string,
  opts: { ownBody?: readonly number[] } = {},
): void {
  assert.ok(res.status < 500, `${what}: ${res.status} (a 5xx for caller input) ${res.text.slice(0, 300)}`);
  assert.ok(
    allowed.includes(res.status),
    `${what}: status ${res.status} is not one of ${allowed.join(', ')}: ${res.text.slice(0, 300)}`,
  );
  // Statuses whose body is not `{error}` by spec (the x402 challenge); the caller checks those.
  if (opts.ownBody?.includes(res.status)) return;
  if (res.status === 401) {
    assert.equal(res.text, '', `${what}: 401 carries no body`);
  } else if (res.status >= 400) {
    assertErrorBody(res, what);
  }
}

export function assertErrorBody(res: Reply, what: string): void {
  assert.ok(
    res.json && typeof res.json === 'object' && !Array.isArray(res.json),
    `${what}: ${res.status} without a JSON object body: ${res.text.slice(0, 300)}`,
  );
  assert.deepEqual(
    Object.keys(res.json),
    ['error'],
    `${what}: ${res.status} body is not exactly {error}: ${res.text.slice(0, 300)}`,
  );
  assert.equal(typeof res.json.error, 'string', `${what}: error is not a string`);
  assert.ok(res.json.error.length > 0 && res.json.error.length <= 300, `${what}: error message is empty or long`);
}

/** Counts unhandled rejections and uncaught exceptions while the fuzz runs (it must see none). */
function watchProcess(): { problems: string[]; stop(): void } {
  const problems: string[] = [];
  const onRejection = (reason: unknown) =>
    problems.push(`unhandledRejection: ${(reason as Error)?.stack ?? String(reason)}`);
  const onException = (err: Error) => problems.push(`uncaughtException: ${err.stack ?? err.message}`);
  process.on('unhandledRejection', onRejection);
  process.on('uncaughtExceptionMonitor', onException);
  return {
    problems,
    stop() {
      process.off('unhandledRejection', onRejection);
      process.off('uncaughtExceptionMonitor', onException);
    },
  };
}

/** After each fuzz test: no handler crashed into an unhandled error (even one mapped to a 4xx), no stray rejection. */
function assertNoCrashes(lines: string[], watch: { problems: string[] }): void {
  const errors = lines.filter((l) => /"level":(50|60)/.test(l));
  assert.deepEqual(errors.slice(0, 3), [], 'the API logged unhandled errors');
  assert.deepEqual(watch.problems.slice(0, 3), [], 'unhandled rejections or exceptions');
  lines.length = 0;
}

export type FuzzHarness = { gateway: ExtraGateway; client: FuzzClient; upstream: TestUpstream };

/**
 * The fuzz suites' common frame, registered as mocha hooks of the calling suite: a gateway
 * whose log lines are kept, a pooled client, an upstream, and after each test the check that
 * nothing crashed. The fields are filled by the `before` hook.
 */
export function useFuzzHarness(handler?: Parameters<typeof startUpstream>[0]): FuzzHarness {
  const harness = {} as FuzzHarness;
  let watch: ReturnType<typeof watchProcess>;
  before(async () => {
    harness.gateway = await startCapturedGateway();
    harness.client = fuzzClient(harness.gateway.url);
    harness.upstream = await startUpstream(handler);
    watch = watchProcess();
  });
  after(async () => {
    watch.stop();
    await harness.client.close();
    await harness.gateway.close();
    await harness.upstream.close();
  });
  afterEach(() => assertNoCrashes(harness.gateway.lines, watch));
  return harness;
}
