// Prebuilt workflow bundles end to end: `npm run build` (the script itself, into a folder of its
// own) writes both workers' bundles with their manifests; a gateway worker PROCESS started with
// NODE_ENV=production loads the gateway bundle instead of bundling, and an invocation completes
// through it with tracing off (the bundle carries the tracing interceptors: their spans go to a
// sink that drops them). A production worker refuses a bundle that is missing or built from
// other sources: one line naming it and why, exit 2, no stack trace, nothing started. The
// workflow code hash a build id falls back to (lib/workflow-code-hash.ts) covers every project
// file a bundle holds; a production worker told to promote on every start warns once.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { randomUUID } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { workflowCodeFiles } from '../../lib/workflow-code-hash.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { workflowResult } from '../support/workflows.ts';
import {
  invokeThrough,
  refusedWorkerProcess,
  startWorkerProcess,
  stopWorkerProcess,
} from '../support/worker-process.ts';

const STACK = /^\s+at .+:\d+:\d+\)?$/m;

function build(out: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  // The console into the same folder: the test writes nothing into the checkout's dist/.
  const child = spawn(process.execPath, ['scripts/build.ts', '--out', out, '--console-out', join(out, 'console')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code, stdout, stderr })));
}

/** The refusal: the heading naming the process, then the one problem line. */
function assertRefused(r: { code: number | null; stdout: string; stderr: string }, why: RegExp): void {
  assert.equal(r.code, 2, r.stdout + r.stderr);
  assert.doesNotMatch(r.stdout + r.stderr, STACK);
  assert.doesNotMatch(r.stdout, /gateway worker running/);
  const lines = r.stderr.trim().split('\n');
  assert.deepEqual(lines.length, 2, r.stderr);
  assert.match(lines[0], /^worker: invalid configuration \(1 problem; nothing started\):$/);
  assert.match(lines[1], why);
  assert.match(lines[1], /run npm run build$/);
}

describe('prebuilt workflow bundles (npm run build)', function () {
  this.timeout(240_000);
  const folders: string[] = [];
  const folder = (prefix: string) => {
    folders.push(mkdtempSync(join(tmpdir(), prefix)));
    return folders.at(-1)!;
  };
  const dir = folder('workflow-bundles-');
  let upstream: TestUpstream;
  const children: ChildProcess[] = [];

  before(async () => {
    const built = await build(dir);
    assert.equal(built.code, 0, built.stdout + built.stderr);
    assert.match(built.stdout, /^gateway workflows: .*gateway\.js \(\d+ KiB\)$/m);
    assert.match(built.stdout, /^facilitator workflows: .*facilitator\.js \(\d+ KiB\)$/m);
    assert.match(built.stdout, /^console: .*console \(3 files, \d+ KiB\)$/m);
    assert.ok(existsSync(join(dir, 'console', 'index.html')), 'the console beside the bundles');
    upstream = await startUpstream();
  });
  after(async () => {
    for (const child of children) await stopWorkerProcess(child);
    await upstream?.close();
    for (const made of folders) rmSync(made, { recursive: true, force: true });
  });

  it('writes each bundle with a manifest of its sources, tracing interceptors included', () => {
    for (const name of ['gateway', 'facilitator']) {
      assert.ok(existsSync(join(dir, `${name}.js`)));
      const manifest = JSON.parse(readFileSync(join(dir, `${name}.json`), 'utf8'));
      assert.match(manifest.code, /^[0-9a-f]{64}$/);
      assert.ok(Object.keys(manifest.packages).includes('node_modules/@temporalio/interceptors-opentelemetry'));
      assert.ok(Object.keys(manifest.packages).includes('node_modules/@temporalio/workflow'));
    }
    assert.ok(JSON.parse(readFileSync(join(dir, 'gateway.json'), 'utf8')).files['workflows/invocation.ts']);
    assert.ok(JSON.parse(readFileSync(join(dir, 'facilitator.json'), 'utf8')).files['workflows/settlement.ts']);
  });

  it('the workflow code hash a build id falls back to covers every project file of both bundles', () => {
    const hashed = workflowCodeFiles();
    for (const name of ['gateway', 'facilitator']) {
      const files = Object.keys(JSON.parse(readFileSync(join(dir, `${name}.json`), 'utf8')).files);
      assert.ok(files.length > 0);
      assert.deepEqual(
        files.filter((f) => !hashed.includes(f)),
        [],
        `${name}: bundled but not in lib/workflow-code-hash.ts`,
      );
    }
  });

  it('a production worker process runs an invocation on the prebuilt bundle, tracing off', async () => {
    const taskQueue = `bundle-${randomUUID()}`;
    let output = '';
    const worker = await startWorkerProcess(
      taskQueue,
      // Promoting on every start is risky in production: the worker says so (its version is the
      // stack's, already current, so the promotion itself changes nothing).
      { NODE_ENV: 'production', WORKFLOW_BUNDLE_DIR: dir, TEMPORAL_PROMOTE_VERSION: 'always' },
      (c) => (output += c),
    );
    children.push(worker);
    const row = await invokeThrough(taskQueue, upstream.url, 'prebuilt');
    assert.equal(row.status, 'succeeded');
    assert.equal(row.upstreamStatus, 200);
    assert.equal(upstream.received.at(-1)?.body.toString(), 'prebuilt');
    // The workflow's own end (its last spans handed to the sink), then everything the worker wrote.
    await workflowResult(row.id);
    worker.kill('SIGTERM');
    await once(worker, 'close');
    const entries = output
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l));
    assert.equal(entries.find((e) => e.msg === 'prebuilt workflow bundle')?.workflowBundle, join(dir, 'gateway.js'));
    assert.equal(entries.filter((e) => /^TEMPORAL_PROMOTE_VERSION=always in production/.test(e.msg)).length, 1);
    // Bundling at start would say so; a sink the bundle calls but the worker lacks is an error per call.
    assert.doesNotMatch(output, /Workflow bundle created|unregistered external sink|sink function threw/);
  });

  it('refuses a missing bundle in production: one line, exit 2', async () => {
    const empty = folder('no-bundle-');
    assertRefused(
      await refusedWorkerProcess({ NODE_ENV: 'production', WORKFLOW_BUNDLE_DIR: empty }),
      /^ {2}WORKFLOW_BUNDLE_DIR: the gateway workflow bundle \S+gateway\.js is missing/,
    );
  });

  it('refuses a bundle built from other sources, naming the file that changed', async () => {
    const stale = folder('stale-bundle-');
    cpSync(dir, stale, { recursive: true });
    const manifestFile = join(stale, 'gateway.json');
    const manifest = JSON.parse(readFileSync(manifestFile, 'utf8'));
    manifest.files['workflows/invocation.ts'] = '0'.repeat(64);
    writeFileSync(manifestFile, JSON.stringify(manifest));
    assertRefused(
      await refusedWorkerProcess({ NODE_ENV: 'production', WORKFLOW_BUNDLE_DIR: stale }),
      /is stale: workflows\/invocation\.ts changed since it was built/,
    );
    // A bundle file edited after the build is refused as well.
    manifest.files['workflows/invocation.ts'] = JSON.parse(readFileSync(join(dir, 'gateway.json'), 'utf8')).files[
      'workflows/invocation.ts'
    ];
    writeFileSync(manifestFile, JSON.stringify(manifest));
    writeFileSync(join(stale, 'gateway.js'), `${readFileSync(join(stale, 'gateway.js'), 'utf8')}\n;`);
    assertRefused(
      await refusedWorkerProcess({ NODE_ENV: 'production', WORKFLOW_BUNDLE_DIR: stale }),
      /is stale: the bundle file was changed after it was built/,
    );
  });
});
