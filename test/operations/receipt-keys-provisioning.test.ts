// A deployment's receipt key folder (RECEIPT_KEYS_DIR) is provisioned before its processes
// start: an API or a gateway worker that finds it without a key stops at start in one line
// naming the command that makes one (instead of each making a key of its own, which the other
// would not publish, or failing on its first receipt); `npm run receipt-keys -- init` makes the
// first key once, and an API started on that folder publishes it.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { stackProcessEnv } from '../support/worker-process.ts';
import { startApiProcess } from '../support/api-process.ts';
import { freePort } from '../../scripts/lib/ports.ts';

type Run = { code: number | null; stdout: string; stderr: string };

function run(script: string, args: string[], env: Record<string, string | undefined>): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.once('error', reject);
    child.once('exit', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('a deployment receipt key folder (RECEIPT_KEYS_DIR)', function () {
  this.timeout(120_000);
  let api: ChildProcess | undefined;
  after(() => {
    if (api && api.exitCode === null) api.kill('SIGKILL');
  });

  it('empty: the API and the worker stop at start in one line naming npm run receipt-keys -- init, and make no key', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'receipt-keys-'));
    for (const [name, script, port] of [
      ['api', 'api/main.ts', 'API_METRICS_PORT'],
      ['worker', 'temporal/gateway-worker-main.ts', 'WORKER_METRICS_PORT'],
    ] as const) {
      const r = await run(script, [], {
        ...stackProcessEnv(),
        RECEIPT_KEYS_DIR: dir,
        [port]: '0',
        PORT: String(await freePort()),
      });
      assert.equal(r.code, 2, r.stdout + r.stderr);
      assert.deepEqual(r.stderr.trim().split('\n'), [
        `${name}: invalid configuration (1 problem; nothing started):`,
        `  RECEIPT_KEYS_DIR: ${dir} holds no receipt signing key; make the first once with npm run receipt-keys -- init, and give every API and gateway worker the same keys`,
      ]);
    }
    assert.deepEqual(readdirSync(dir), [], 'no process made a key of its own');
  });

  it('npm run receipt-keys -- init makes the first key once; an API on the folder publishes it', async () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'receipt-keys-')), 'keys');
    const first = await run('scripts/receipt-keys.ts', ['init'], { RECEIPT_KEYS_DIR: dir });
    assert.equal(first.code, 0, first.stderr);
    const kid = /^added (\S+)$/m.exec(first.stdout)?.[1];
    assert.ok(kid, first.stdout);
    const again = await run('scripts/receipt-keys.ts', ['init'], { RECEIPT_KEYS_DIR: dir });
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.stdout.trim(), `${kid}  (active)`, 'a folder with keys is left as it is');

    const started = await startApiProcess({ RECEIPT_KEYS_DIR: dir });
    api = started.child;
    const jwks = (await (await request(`${started.url}/.well-known/jwks.json`)).body.json()) as {
      keys: Array<{ kid: string }>;
    };
    assert.deepEqual(
      jwks.keys.map((k) => k.kid),
      [kid],
    );
  });
});
