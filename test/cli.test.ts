// Every operator command behaves like a finished tool: `--help` prints its usage and exits 0
// (and starts nothing), a bad argument is one line plus the usage and exit 2, and a bad
// configuration is one line and a non-zero exit; never a stack trace.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

type Run = { code: number | null; stdout: string; stderr: string };

function run(script: string, args: string[], env: Record<string, string> = {}): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [script, ...args], {
      env: { ...process.env, ...env, DEBUG: '' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    child.once('error', reject);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

const aFile = join(mkdtempSync(join(tmpdir(), 'cli-')), 'not-a-folder');
writeFileSync(aFile, 'x');

// A bad setting each command reads (a file where a folder is expected, a malformed key list,
// an address nothing answers on).
const COMMANDS: Array<{ name: string; script: string; badEnv: Record<string, string>; badEnvArgs?: string[] }> = [
  {
    name: 'token',
    script: 'scripts/token.ts',
    badEnv: { AUTH_JWT_SECRET: '', DATA_DIR: aFile },
    badEnvArgs: ['--tenant', 't', '--user', 'u'],
  },
  { name: 'replay', script: 'scripts/replay.ts', badEnv: {}, badEnvArgs: [aFile] },
  {
    name: 'verify-receipt',
    script: 'scripts/verify-receipt.ts',
    badEnv: { RECEIPT_KEYS_DIR: join(aFile, 'keys') },
    badEnvArgs: [aFile],
  },
  { name: 'receipt-keys', script: 'scripts/receipt-keys.ts', badEnv: { RECEIPT_ACTIVE_KID: 'not a kid!' } },
  {
    name: 'facilitator',
    script: 'scripts/facilitator.ts',
    badEnv: { FACILITATOR_DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' },
    badEnvArgs: ['accounts', 'list'],
  },
  { name: 'bench', script: 'bench/run.ts', badEnv: {}, badEnvArgs: ['nosuch'] },
  { name: 'chaos', script: 'scripts/chaos/run.ts', badEnv: {}, badEnvArgs: ['nosuch'] },
  { name: 'tools', script: 'scripts/lib/tools.ts', badEnv: {} },
  { name: 'migrate', script: 'scripts/migrate.ts', badEnv: { DATABASE_URL: 'not a url' } },
  { name: 'rotate-kek', script: 'scripts/rotate-kek.ts', badEnv: { VAULT_KEKS: 'bad' } },
];

const STACK = /^\s+at .+\(?.*:\d+:\d+\)?$/m;

describe('operator commands', function () {
  this.timeout(120_000);

  for (const c of COMMANDS) {
    describe(`npm run ${c.name}`, () => {
      it('--help: usage on stdout, exit 0', async () => {
        const r = await run(c.script, ['--help']);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stdout, new RegExp(`^usage:[\\s\\S]*npm run ${c.name}`));
        assert.doesNotMatch(r.stdout + r.stderr, STACK);
      });

      it('an unknown option: one line naming it, the usage, exit 2', async () => {
        const r = await run(c.script, ['--no-such-option']);
        assert.equal(r.code, 2, r.stdout + r.stderr);
        const lines = r.stderr.trim().split('\n');
        assert.match(lines[0], /--no-such-option/);
        assert.match(lines[1], /^usage:/);
        assert.doesNotMatch(r.stderr, STACK);
      });

      if (c.badEnvArgs !== undefined || Object.keys(c.badEnv).length > 0) {
        it('a bad setting or input: one line, a non-zero exit, no stack trace', async () => {
          const r = await run(c.script, c.badEnvArgs ?? [], c.badEnv);
          assert.notEqual(r.code, 0, r.stdout + r.stderr);
          assert.doesNotMatch(r.stdout + r.stderr, STACK);
          const errorLines = r.stderr
            .trim()
            .split('\n')
            .filter((l) => !/^\s*(usage:|npm run|\s{2})/.test(l));
          assert.ok(errorLines.length <= 1 || r.stdout.includes('FAILED'), `more than one line: ${r.stderr}`);
        });
      }
    });
  }

  it('npm run chaos -- --help starts no scenario', async () => {
    const r = await run('scripts/chaos/run.ts', ['--help', 'worker-kill']);
    assert.equal(r.code, 0);
    assert.doesNotMatch(r.stdout + r.stderr, /^(PASS|FAIL) |^\.\.\. worker-kill/m);
  });
});
