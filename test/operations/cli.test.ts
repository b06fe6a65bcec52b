// Every operator command behaves like a finished tool: `--help` prints its usage and exits 0
// (and starts nothing); a bad argument (an unknown flag, a missing or bad value) is one line on
// stderr and exit 2; a bad configuration is reported before anything starts, every problem on
// a line of its own; never a stack trace. And the commands that read the data folder read the
// one npm start uses, and say so.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Wallet } from 'ethers';
import { stack } from '../support/stack.ts';
import { freePort } from '../../scripts/lib/ports.ts';
import { dropDatabase, ensureDatabase, withDatabase } from '../../scripts/lib/postgres.ts';
import { startVersioning } from '../../scripts/lib/start-versioning.ts';
import { stackProcessEnv } from '../support/worker-process.ts';
import { facilitatorEnv } from '../support/facilitator.ts';
import { balanceOf, chainProvider } from '../support/x402.ts';
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

// A bad value of an argument and a bad setting each command reads (a file where a folder is
// expected, a malformed key list, an address nothing answers on).
type Command = {
  name: string;
  script: string;
  /** Arguments with a bad value, or an option whose value is missing. */
  badArgs: string[];
  badEnv?: Record<string, string>;
  badEnvArgs?: string[];
};
const COMMANDS: Command[] = [
  {
    name: 'token',
    script: 'scripts/token.ts',
    badArgs: ['--tenant', 't', '--user', 'u', '--ttl', 'soon'],
    badEnv: { AUTH_JWT_SECRET: '', DATA_DIR: aFile },
    badEnvArgs: ['--tenant', 't', '--user', 'u'],
  },
  { name: 'replay', script: 'scripts/replay.ts', badArgs: [], badEnvArgs: [aFile] },
  { name: 'build', script: 'scripts/build.ts', badArgs: ['--out'], badEnvArgs: ['--out', join(aFile, 'bundles')] },
  {
    name: 'verify-receipt',
    script: 'scripts/verify-receipt.ts',
    badArgs: ['receipt.jws', '--jwks'],
    badEnv: { RECEIPT_KEYS_DIR: join(aFile, 'keys') },
    badEnvArgs: [aFile],
  },
  {
    name: 'receipt-keys',
    script: 'scripts/receipt-keys.ts',
    badArgs: ['shred'],
    badEnv: { RECEIPT_ACTIVE_KID: 'not a kid!' },
  },
  {
    name: 'facilitator',
    script: 'scripts/facilitator.ts',
    badArgs: ['certs', 'issue', '--name', '../escape'],
    badEnv: { FACILITATOR_DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' },
    badEnvArgs: ['accounts', 'list'],
  },
  { name: 'bench', script: 'bench/run.ts', badArgs: ['nosuch'] },
  { name: 'bench:analytics', script: 'bench/analytics.ts', badArgs: ['--runs'] },
  { name: 'bench:proxy', script: 'bench/proxy.ts', badArgs: ['--seconds'] },
  { name: 'bench:settle', script: 'bench/settle.ts', badArgs: ['--n'] },
  { name: 'bench:throughput', script: 'bench/throughput.ts', badArgs: ['--concurrency'] },
  { name: 'chaos', script: 'scripts/chaos/run.ts', badArgs: ['nosuch'] },
  { name: 'tools', script: 'scripts/lib/tools.ts', badArgs: ['temporal'] },
  { name: 'migrate', script: 'scripts/migrate.ts', badArgs: ['now'], badEnv: { DATABASE_URL: 'not a url' } },
  { name: 'rotate-kek', script: 'scripts/rotate-kek.ts', badArgs: ['all'], badEnv: { VAULT_KEKS: 'bad' } },
  {
    name: 'dev',
    script: 'scripts/dev.ts',
    badArgs: ['fund', '0x12'],
    badEnv: { ANVIL_PORT: '1', CHAIN_RPC_URL: '' },
    badEnvArgs: ['fund', Wallet.createRandom().address],
  },
  { name: 'start', script: 'scripts/start.ts', badArgs: ['now'], badEnv: { LOG_LEVEL: 'loud' } },
];

const STACK = /^\s+at .+\(?.*:\d+:\d+\)?$/m;
/** The lines a command may add to its one error line: where it reads its data folder. */
const DATA_FOLDER = /: data folder /;

function assertOneLineExit2(r: Run, name: string, mentions?: RegExp): void {
  assert.equal(r.code, 2, r.stdout + r.stderr);
  const lines = r.stderr.trim().split('\n');
  assert.equal(lines.length, 1, `one line, not: ${r.stderr}`);
  assert.match(lines[0], new RegExp(`^${name}: `));
  if (mentions) assert.match(lines[0], mentions);
  assert.doesNotMatch(r.stdout + r.stderr, STACK);
}

describe('operator commands', function () {
  this.timeout(120_000);

  for (const c of COMMANDS) {
    const invoked = c.name === 'start' ? 'npm start' : `npm run ${c.name}`;
    describe(invoked, () => {
      it('--help: usage on stdout, exit 0', async () => {
        const r = await run(c.script, ['--help']);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stdout, new RegExp(`^usage:[\\s\\S]*${invoked}`));
        assert.equal(r.stderr, '');
        assert.doesNotMatch(r.stdout + r.stderr, STACK);
      });

      it('an unknown option: one line naming it, exit 2', async () => {
        assertOneLineExit2(await run(c.script, ['--no-such-option']), c.name, /--no-such-option/);
      });

      if (c.badArgs.length) {
        it('a bad or missing value: one line, exit 2', async () => {
          assertOneLineExit2(await run(c.script, c.badArgs), c.name);
        });
      }

      if (c.badEnv || c.badEnvArgs) {
        it('a bad setting or input: one line, a non-zero exit, no stack trace', async () => {
          const r = await run(c.script, c.badEnvArgs ?? [], c.badEnv);
          assert.notEqual(r.code, 0, r.stdout + r.stderr);
          assert.doesNotMatch(r.stdout + r.stderr, STACK);
          const errorLines = r.stderr
            .trim()
            .split('\n')
            .filter((l) => !/^\s/.test(l) && !DATA_FOLDER.test(l));
          assert.ok(errorLines.length <= 1 || r.stdout.includes('FAILED'), `more than one line: ${r.stderr}`);
        });
      }
    });
  }

  it('npm test -- --help: usage on stdout, exit 0, and no step runs', async () => {
    const r = await run('scripts/test.ts', ['--help']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^usage: npm test/);
    assert.doesNotMatch(r.stdout, /^> type check/m);
  });

  it('npm test with TEST_SHARDS not a whole number of at least 1: one line, exit 2, and no step runs', async () => {
    for (const shards of ['0', 'two', '1.5']) {
      const r = await run('scripts/test.ts', [], { TEST_SHARDS: shards });
      assertOneLineExit2(r, 'npm test', /TEST_SHARDS/);
      assert.doesNotMatch(r.stdout, /^> type check/m);
    }
  });

  // The examples are commands too (README, "Commands"): --help sends nothing (call-agent would
  // create an agent), and a flag they do not take is one line, exit 2.
  for (const [name, script] of [
    ['example:call-agent', 'examples/call-agent.ts'],
    ['example:x402-fetch', 'examples/pay-x402-fetch.ts'],
    ['example:x402-v2', 'examples/pay-x402-v2.ts'],
    ['example:mcp-client', 'examples/mcp-client.ts'],
    ['example:mcp-federation', 'examples/mcp-federation.ts'],
    ['example:verify-receipt', 'examples/verify-receipt.ts'],
    ['example:budget', 'examples/budget.ts'],
  ]) {
    it(`npm run ${name} -- --help: usage, exit 0, nothing sent; an unknown option: one line, exit 2`, async () => {
      const unreachable = { GATEWAY_URL: 'http://127.0.0.1:1', TOKEN: 'not-used' };
      const help = await run(script, ['--help'], unreachable);
      assert.equal(help.code, 0, help.stderr);
      assert.match(help.stdout, new RegExp(`^usage: npm run ${name}`));
      assert.equal(help.stderr, '');
      assertOneLineExit2(await run(script, ['--no-such-option'], unreachable), name, /--no-such-option/);
    });
  }

  it('npm run chaos -- --help starts no scenario', async () => {
    const r = await run('scripts/chaos/run.ts', ['--help', 'worker-kill']);
    assert.equal(r.code, 0);
    assert.doesNotMatch(r.stdout + r.stderr, /^(PASS|FAIL) |^\.\.\. worker-kill/m);
  });

  it('npm run tools, with every tool there: one line naming every binary, nothing on stderr', async () => {
    const r = await run('scripts/lib/tools.ts', []);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stderr, '');
    const m = /^tools ready: temporal (\S+), bao (\S+), schemathesis (\S+), temporal-test-server (\S+)\n$/.exec(
      r.stdout,
    );
    assert.ok(m, r.stdout);
    assert.ok(
      m.slice(1).every((path) => existsSync(path)),
      r.stdout,
    );
  });

  it('npm run bench:analytics: each step on stderr, started and done with its duration; figures on stdout', async () => {
    const r = await run('bench/analytics.ts', ['--invocations', '2000', '--runs', '1'], {
      DATABASE_URL: stack().infra.databaseUrl,
    });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const lines = r.stderr.trim().split('\n');
    const started = lines.filter((l) => /^analytics: .+ \.\.\.$/.test(l));
    const done = lines.filter((l) => /^analytics: .+: done in \d+\.\d s$/.test(l));
    assert.ok(
      started.some((l) => l.startsWith('analytics: seeding (2,000 invocations')),
      r.stderr,
    );
    assert.ok(started.length >= 5 && done.length === started.length, r.stderr);
    assert.equal(lines.length, started.length + done.length, r.stderr);
    assert.match(r.stdout, /^# analytics benchmark: 2,000 invocations/m);
    assert.doesNotMatch(r.stdout, / \.\.\.$|done in/m);
  });
});

describe('configuration errors, reported together before anything starts', function () {
  this.timeout(120_000);
  let taken: Server;
  let takenPort: number;

  before(async () => {
    taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    takenPort = (taken.address() as { port: number }).port;
  });
  after(() => new Promise((resolve) => taken.close(resolve)));

  /** Every expected line is there, each on a line of its own; exit 2, no stack trace. */
  function assertReported(r: Run, name: string, expected: RegExp[]): void {
    assert.equal(r.code, 2, r.stdout + r.stderr);
    assert.doesNotMatch(r.stdout + r.stderr, STACK);
    const lines = r.stderr.trim().split('\n');
    assert.match(
      lines[0],
      new RegExp(`^${name}: invalid configuration \\(${expected.length} problems; nothing started\\):$`),
    );
    for (const pattern of expected)
      assert.equal(lines.filter((l) => pattern.test(l)).length, 1, `${pattern} once in:\n${r.stderr}`);
    assert.equal(lines.length, expected.length + 1, r.stderr);
  }

  const GATEWAY_MISTAKES = () => ({
    PORT: 'eighty',
    LOG_LEVEL: 'loud',
    AUTH_JWT_SECRET: 'short-secret',
  });
  const GATEWAY_LINES = [
    /^ {2}PORT must be a number$/,
    /^ {2}LOG_LEVEL must be one of .*info/,
    /^ {2}AUTH_JWT_SECRET is 12 bytes/,
  ];

  it('the API: a bad PORT, an unknown LOG_LEVEL, a short secret and a taken metrics port', async () => {
    const r = await run('api/main.ts', [], { ...GATEWAY_MISTAKES(), API_METRICS_PORT: String(takenPort) });
    assertReported(r, 'api', [
      ...GATEWAY_LINES,
      new RegExp(`^ {2}API_METRICS_PORT: 127\\.0\\.0\\.1:${takenPort} is taken`),
    ]);
  });

  it('the worker: the same mistakes, its own metrics port taken and bad deployment version settings', async () => {
    const r = await run('temporal/gateway-worker-main.ts', [], {
      ...GATEWAY_MISTAKES(),
      WORKER_METRICS_PORT: String(takenPort),
      BODY_RETENTION_DAYS: '-1',
      TEMPORAL_DEPLOYMENT_NAME: 'agent.gateway',
      TEMPORAL_VERSIONING_BEHAVIOR: 'sometimes',
    });
    assertReported(r, 'worker', [
      ...GATEWAY_LINES,
      /^ {2}BODY_RETENTION_DAYS must be at least 0$/,
      /^ {2}TEMPORAL_DEPLOYMENT_NAME must be a name without dots or spaces/,
      /^ {2}TEMPORAL_VERSIONING_BEHAVIOR must be one of pinned, auto-upgrade$/,
      new RegExp(`^ {2}WORKER_METRICS_PORT: 127\\.0\\.0\\.1:${takenPort} is taken`),
    ]);
  });

  it('the facilitator: a bad port, an unknown LOG_LEVEL, a bad token address, a taken metrics port and a bad promotion setting', async () => {
    const r = await run('facilitator-service/main.ts', [], {
      FACILITATOR_PORT: 'x',
      FACILITATOR_PUBLIC_PORT: String(await freePort()),
      LOG_LEVEL: 'loud',
      TOKEN_ADDRESS: '0x12',
      FACILITATOR_METRICS_PORT: String(takenPort),
      TEMPORAL_PROMOTE_VERSION: 'never',
    });
    assertReported(r, 'facilitator', [
      /^ {2}FACILITATOR_PORT must be a number$/,
      /^ {2}TEMPORAL_PROMOTE_VERSION must be one of first, always$/,
      /^ {2}LOG_LEVEL must be one of/,
      /^ {2}TOKEN_ADDRESS must be a token contract address/,
      new RegExp(`^ {2}FACILITATOR_METRICS_PORT: 127\\.0\\.0\\.1:${takenPort} is taken`),
    ]);
  });

  it('the API: an API key the Temporal settings would send in clear, a token address with a wrong checksum', async () => {
    const r = await run('api/main.ts', [], {
      AUTH_JWT_SECRET: randomBytes(32).toString('hex'),
      TEMPORAL_API_KEY: 'a-temporal-cloud-key',
      TEMPORAL_TLS: 'false',
      // npm start's token address, one letter's case changed: the EIP-55 checksum no longer holds.
      TOKEN_ADDRESS: '0x5fbDB2315678afecb367f032d93F642f64180aa3',
    });
    assertReported(r, 'api', [
      /^ {2}TEMPORAL_TLS: false would send TEMPORAL_API_KEY over plaintext gRPC/,
      /^ {2}TOKEN_ADDRESS has a wrong EIP-55 checksum/,
    ]);
    assert.doesNotMatch(r.stderr, /a-temporal-cloud-key/);
  });

  it('the worker: half a client certificate pair for Temporal, named instead of dropped', async () => {
    const r = await run('temporal/gateway-worker-main.ts', [], {
      AUTH_JWT_SECRET: randomBytes(32).toString('hex'),
      TEMPORAL_TLS_CLIENT_CERT_PATH: aFile,
      LOG_LEVEL: 'loud',
    });
    assertReported(r, 'worker', [
      /^ {2}TEMPORAL_TLS_CLIENT_KEY_PATH: TEMPORAL_TLS_CLIENT_CERT_PATH is set without it/,
      /^ {2}LOG_LEVEL must be one of/,
    ]);
  });

  it('the facilitator: a TEMPORAL_CONFIG_FILE that is not there (not a silent fallback to 127.0.0.1:7233)', async () => {
    const missing = join(tmpdir(), `missing-${randomBytes(4).toString('hex')}.toml`);
    const r = await run(
      'facilitator-service/main.ts',
      [],
      facilitatorEnv(stack().infra, {
        FACILITATOR_METRICS_PORT: '0',
        TEMPORAL_CONFIG_FILE: missing,
        LOG_LEVEL: 'loud',
      }),
    );
    assertReported(r, 'facilitator', [
      /^ {2}TEMPORAL_CONFIG_FILE: .*\.toml does not exist/,
      /^ {2}LOG_LEVEL must be one of/,
    ]);
  });

  it('the facilitator: the TLS and keystore files it reads at start, each one it cannot read', async () => {
    const missing = join(tmpdir(), `missing-${randomBytes(4).toString('hex')}`);
    const r = await run(
      'facilitator-service/main.ts',
      [],
      facilitatorEnv(stack().infra, {
        FACILITATOR_METRICS_PORT: '0',
        FACILITATOR_TLS_KEY: `${missing}-key.pem`,
        FACILITATOR_KEYSTORE_FILE: aFile,
        LOG_LEVEL: 'info',
      }),
    );
    assertReported(r, 'facilitator', [
      /^ {2}FACILITATOR_TLS_KEY: cannot read .*-key\.pem \(ENOENT\)$/,
      /^ {2}FACILITATOR_KEYSTORE_FILE: cannot read .* as a JSON keystore/,
    ]);
  });

  /** The facilitator worker with these settings, where nothing answers: a refusal must come before any connection is tried. */
  const workerWith = (overrides: Record<string, string>) =>
    run(
      'temporal/facilitator-worker-main.ts',
      [],
      facilitatorEnv(stack().infra, {
        TEMPORAL_ADDRESS: '127.0.0.1:1',
        FACILITATOR_DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none',
        LOG_LEVEL: 'info',
        ...overrides,
      }),
    );

  it('the facilitator worker: a keystore password that does not decrypt it, one line before it connects', async () => {
    const r = await workerWith({ FACILITATOR_KEYSTORE_PASSWORD: 'not-the-password' });
    assert.equal(r.code, 2, r.stdout + r.stderr);
    assert.doesNotMatch(r.stdout + r.stderr, STACK);
    assert.doesNotMatch(r.stdout + r.stderr, /not-the-password/);
    assert.deepEqual(r.stderr.trim().split('\n'), [
      'facilitator-worker: invalid configuration (1 problem; nothing started):',
      "  FACILITATOR_KEYSTORE_PASSWORD: it does not decrypt FACILITATOR_KEYSTORE_FILE (a wrong password, or another wallet's file)",
    ]);
  });

  it('the facilitator worker settling batch-settlement: the receiver authorizer’s keystore, missing or not decrypted by its password, one line each', async () => {
    const missing = await workerWith({ FACILITATOR_AUTHORIZER_KEYSTORE_FILE: '' });
    assert.equal(missing.code, 2, missing.stdout + missing.stderr);
    assert.match(missing.stderr, /^ {2}FACILITATOR_AUTHORIZER_KEYSTORE_FILE must be set$/m);
    const wrong = await workerWith({ FACILITATOR_AUTHORIZER_KEYSTORE_PASSWORD: 'not-the-password' });
    assert.equal(wrong.code, 2, wrong.stdout + wrong.stderr);
    assert.doesNotMatch(wrong.stdout + wrong.stderr, /not-the-password/);
    assert.deepEqual(wrong.stderr.trim().split('\n'), [
      'facilitator-worker: invalid configuration (1 problem; nothing started):',
      "  FACILITATOR_AUTHORIZER_KEYSTORE_PASSWORD: it does not decrypt FACILITATOR_AUTHORIZER_KEYSTORE_FILE (a wrong password, or another wallet's file)",
    ]);
  });

  it('npm start: the settings of every process it would run, checked before it starts any', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'start-'));
    const r = await run('scripts/start.ts', [], {
      ...GATEWAY_MISTAKES(),
      DATA_DIR: dataDir,
      ANVIL_PORT: '99999',
      DEMO_UPSTREAM_PORT: String(takenPort),
      // Every other port free, whatever else runs on this machine.
      ...Object.fromEntries(
        await Promise.all(
          ['FACILITATOR_PORT', 'FACILITATOR_PUBLIC_PORT', 'TEMPORAL_PORT', 'TEMPORAL_UI_PORT', 'EMBEDDED_PG_PORT']
            .concat(['OPENBAO_PORT', 'API_METRICS_PORT', 'WORKER_METRICS_PORT', 'FACILITATOR_METRICS_PORT'])
            .map(async (variable) => [variable, String(await freePort())]),
        ),
      ),
    });
    assertReported(r, 'npm start', [
      ...GATEWAY_LINES,
      /^ {2}ANVIL_PORT must be a port number from 1 to 65535$/,
      new RegExp(`^ {2}DEMO_UPSTREAM_PORT: 127\\.0\\.0\\.1:${takenPort} is taken`),
    ]);
    assert.equal(existsSync(join(dataDir, 'secrets.json')), false, 'nothing started, nothing written');
  });
});

describe("npm start's worker versioning (scripts/lib/start-versioning.ts)", () => {
  it('on its own dev server: promote on every start, workflows auto-upgrade, and the startup line says why', () => {
    const own = startVersioning({});
    assert.deepEqual(own.env, { TEMPORAL_PROMOTE_VERSION: 'always', TEMPORAL_VERSIONING_BEHAVIOR: 'auto-upgrade' });
    assert.match(
      own.line,
      /^TEMPORAL_PROMOTE_VERSION=always, TEMPORAL_VERSIONING_BEHAVIOR=auto-upgrade: .*own dev server/,
    );
    // Explicit settings win.
    assert.deepEqual(startVersioning({ TEMPORAL_VERSIONING_BEHAVIOR: 'pinned' }).env, {
      TEMPORAL_PROMOTE_VERSION: 'always',
      TEMPORAL_VERSIONING_BEHAVIOR: 'pinned',
    });
  });

  it('on a Temporal named by TEMPORAL_ADDRESS: the production defaults, said so; explicit settings pass through', () => {
    const external = startVersioning({ TEMPORAL_ADDRESS: 'temporal.example.com:7233' });
    assert.deepEqual(external.env, {}, 'the children read the production defaults');
    assert.match(
      external.line,
      /^TEMPORAL_PROMOTE_VERSION=first, TEMPORAL_VERSIONING_BEHAVIOR=pinned: this version becomes current only on a deployment without one .*TEMPORAL_ADDRESS/,
    );
    const asked = startVersioning({
      TEMPORAL_ADDRESS: 'temporal.example.com:7233',
      TEMPORAL_PROMOTE_VERSION: 'always',
    });
    assert.deepEqual(asked.env, {}, 'an explicit setting reaches the children as it is, from the environment');
    assert.match(asked.line, /^TEMPORAL_PROMOTE_VERSION=always, .*: each start makes this version current/);
  });
});

describe('commands and the data folder of npm start', function () {
  this.timeout(120_000);

  it('npm run token never makes a secret up: without one it names the data folder and says to run npm start', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'token-'));
    const r = await run('scripts/token.ts', ['--tenant', 't', '--user', 'u'], {
      AUTH_JWT_SECRET: '',
      DATA_DIR: dataDir,
    });
    assert.equal(r.code, 2, r.stderr);
    assert.equal(r.stdout, '');
    const lines = r.stderr.trim().split('\n');
    assert.deepEqual(lines.length, 2, r.stderr);
    assert.match(lines[0], new RegExp(`^token: data folder ${dataDir} \\(DATA_DIR`));
    assert.match(lines[1], /^token: no secret in .*secrets\.json: run npm start first/);
    assert.equal(existsSync(join(dataDir, 'secrets.json')), false);
  });

  it('npm run token reads the secret npm start keeps, and the running API accepts the token', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'token-'));
    writeFileSync(join(dataDir, 'secrets.json'), JSON.stringify({ jwtSecret: stack().infra.secrets.jwtSecret }));
    const r = await run('scripts/token.ts', ['--tenant', 'cli-t', '--user', 'u', '--api', stack().apiUrl], {
      AUTH_JWT_SECRET: '',
      DATA_DIR: dataDir,
    });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /^token: data folder /);
    const res = await fetch(`${stack().apiUrl}/v1/agents`, { headers: { authorization: `Bearer ${r.stdout.trim()}` } });
    assert.equal(res.status, 200);
  });

  it('npm run token refuses, in one line, a secret the running API does not use', async () => {
    const r = await run('scripts/token.ts', ['--tenant', 't', '--user', 'u', '--api', stack().apiUrl], {
      AUTH_JWT_SECRET: randomBytes(32).toString('base64url'),
    });
    assertOneLineExit2(r, 'token', /refuses tokens signed with the secret from AUTH_JWT_SECRET/);
    assert.equal(r.stdout, '');
  });
});

describe('npm run dev -- fund', function () {
  this.timeout(120_000);

  it('mints the dev token to an address on the local chain: its balance grows by the amount', async () => {
    const payer = Wallet.createRandom().address;
    const provider = chainProvider();
    try {
      const before = await balanceOf(provider, payer);
      const env = { CHAIN_RPC_URL: stack().infra.chainRpcUrl, TOKEN_ADDRESS: stack().infra.tokenAddress };
      const r = await run('scripts/dev.ts', ['fund', payer, '2.5'], env);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stdout, new RegExp(`^funded ${payer} with 2\\.5 USDC .*balance 2\\.5 USDC`));
      assert.equal((await balanceOf(provider, payer)) - before, 2_500_000n);
      const again = await run('scripts/dev.ts', ['fund', payer], env);
      assert.equal(again.code, 0, again.stderr);
      assert.equal((await balanceOf(provider, payer)) - before, 102_500_000n, 'the default amount is 100 USDC');
    } finally {
      provider.destroy();
    }
  });
});

describe('a database that is missing, empty or unreachable at start', function () {
  this.timeout(120_000);

  /** One problem line naming the variable and the fix; exit 2, no stack trace. */
  function assertDatabaseRefusal(r: Run, name: string, line: RegExp): void {
    assert.equal(r.code, 2, r.stdout + r.stderr);
    assert.doesNotMatch(r.stdout + r.stderr, STACK);
    const lines = r.stderr.trim().split('\n');
    assert.deepEqual(lines.slice(0, 1), [`${name}: invalid configuration (1 problem; nothing started):`], r.stderr);
    assert.equal(lines.length, 2, r.stderr);
    assert.match(lines[1], line);
  }

  it('the API and the worker refuse a database that does not exist, and create none', async () => {
    const url = withDatabase(stack().config.databaseUrl, `missing_${randomBytes(4).toString('hex')}`);
    const env = { ...stackProcessEnv(), DATABASE_URL: url, PORT: '0', API_METRICS_PORT: '0', WORKER_METRICS_PORT: '0' };
    for (const [entry, name] of [
      ['api/main.ts', 'api'],
      ['temporal/gateway-worker-main.ts', 'worker'],
    ]) {
      const r = await run(entry, [], env as Record<string, string>);
      assertDatabaseRefusal(r, name, /^ {2}DATABASE_URL: the database .*\/missing_\w+ does not exist; npm run migrate/);
    }
    const created = await run('scripts/migrate.ts', [], { DATABASE_URL: url, FACILITATOR_DATABASE_URL: '' });
    try {
      assert.match(created.stdout, /^gateway: applied: /m, 'the refusals left no database behind: migrate created it');
    } finally {
      await dropDatabase(url);
    }
  });

  it('the API refuses a database that was never migrated, naming npm run migrate', async () => {
    const url = withDatabase(stack().config.databaseUrl, `unmigrated_${randomBytes(4).toString('hex')}`);
    await ensureDatabase(url);
    try {
      const r = await run('api/main.ts', [], {
        ...(stackProcessEnv() as Record<string, string>),
        DATABASE_URL: url,
        PORT: '0',
        API_METRICS_PORT: '0',
      });
      assertDatabaseRefusal(
        r,
        'api',
        /^ {2}DATABASE_URL: the database .* lacks (\d+) of \1 migrations .*run npm run migrate/,
      );
    } finally {
      await dropDatabase(url);
    }
  });

  it('an unreachable database: one line naming it, exit 1 (a later start may find it), no stack trace', async () => {
    const r = await run('api/main.ts', [], {
      ...(stackProcessEnv() as Record<string, string>),
      DATABASE_URL: `postgres://gateway:secret-password@127.0.0.1:${await freePort()}/gateway`,
      PORT: '0',
      API_METRICS_PORT: '0',
    });
    assert.equal(r.code, 1, r.stdout + r.stderr);
    assert.doesNotMatch(r.stdout + r.stderr, STACK);
    assert.doesNotMatch(r.stdout + r.stderr, /secret-password/);
    assert.match(
      r.stderr.trim(),
      /^api: DATABASE_URL: cannot use the database 127\.0\.0\.1:\d+\/gateway \(.*ECONNREFUSED.*\); nothing started$/,
    );
  });

  it('a password with an unescaped slash: the line names no part of it', async () => {
    // The URL parser ends the authority at the '/': the host is "gateway", the path holds the rest.
    const r = await run('api/main.ts', [], {
      ...(stackProcessEnv() as Record<string, string>),
      DATABASE_URL: `postgres://gateway:4242/slash-secret@127.0.0.1:${await freePort()}/gateway`,
      PORT: '0',
      API_METRICS_PORT: '0',
    });
    assert.notEqual(r.code, 0, r.stdout + r.stderr);
    assert.doesNotMatch(r.stdout + r.stderr, STACK);
    assert.doesNotMatch(r.stdout + r.stderr, /slash-secret/);
    assert.match(r.stderr.trim(), /^api: DATABASE_URL: cannot use the database the configured database \(/);
  });

  it('the facilitator worker refuses a database that does not exist, in one line', async () => {
    const url = withDatabase(stack().infra.facilitatorDatabaseUrl, `missing_${randomBytes(4).toString('hex')}`);
    const r = await run(
      'temporal/facilitator-worker-main.ts',
      [],
      facilitatorEnv(stack().infra, { FACILITATOR_DATABASE_URL: url }),
    );
    assertDatabaseRefusal(
      r,
      'facilitator-worker',
      /^ {2}FACILITATOR_DATABASE_URL: the database .* does not exist; npm run migrate/,
    );
  });
});

describe('npm run migrate', function () {
  this.timeout(120_000);

  it('creates a missing facilitator database and migrates it, then finds it up to date', async () => {
    const url = withDatabase(stack().infra.facilitatorDatabaseUrl, `migrate_cli_${randomBytes(4).toString('hex')}`);
    try {
      const first = await run('scripts/migrate.ts', [], { DATABASE_URL: '', FACILITATOR_DATABASE_URL: url });
      assert.equal(first.code, 0, first.stderr);
      assert.match(first.stdout, /^facilitator: applied: 0001_init, /m);
      assert.doesNotMatch(first.stdout, /^gateway: /m, 'no gateway database was named');
      const again = await run('scripts/migrate.ts', [], { DATABASE_URL: '', FACILITATOR_DATABASE_URL: url });
      assert.equal(again.code, 0, again.stderr);
      assert.equal(again.stdout.trim(), 'facilitator: up to date');
    } finally {
      await dropDatabase(url);
    }
  });

  it('with neither database named: one line naming both variables, exit 2', async () => {
    const r = await run('scripts/migrate.ts', [], { DATABASE_URL: '', FACILITATOR_DATABASE_URL: '' });
    assertOneLineExit2(r, 'migrate', /DATABASE_URL.*FACILITATOR_DATABASE_URL/);
  });
});

describe('a setting given as an empty string (what compose and Kubernetes templates write)', function () {
  this.timeout(120_000);

  // Every variable the guide and the README name (wildcards left out): all of them empty at once.
  const EMPTY = Object.fromEntries(
    [
      ...new Set(
        ['README.md', 'docs/DEPLOYMENT.md'].flatMap((doc) =>
          [...readFileSync(doc, 'utf8').matchAll(/`([A-Z][A-Z0-9]*_[A-Z0-9_]*[A-Z0-9]|PORT|HOST)`/g)].map((m) => m[1]),
        ),
      ),
    ].map((name) => [name, '']),
  );

  const ENTRIES = [
    { name: 'api', script: 'api/main.ts' },
    { name: 'worker', script: 'temporal/gateway-worker-main.ts' },
    { name: 'facilitator', script: 'facilitator-service/main.ts' },
    { name: 'facilitator-worker', script: 'temporal/facilitator-worker-main.ts' },
  ];

  it('covers the Temporal certificate paths and the facilitator files', () => {
    for (const name of ['TEMPORAL_TLS_CLIENT_KEY_PATH', 'TEMPORAL_TLS_CLIENT_CERT_PATH', 'FACILITATOR_TLS_KEY'])
      assert.ok(name in EMPTY, name);
  });

  for (const entry of ENTRIES) {
    it(`${entry.name}: is unset, so each is its default or a one-line "must be set"; exit 2, no stack trace`, async () => {
      // LOG_LEVEL=loud: one mistake for sure, so the process stops before it connects anywhere.
      const r = await run(entry.script, [], { ...EMPTY, LOG_LEVEL: 'loud' });
      assert.equal(r.code, 2, r.stdout + r.stderr);
      assert.doesNotMatch(r.stdout + r.stderr, STACK);
      assert.doesNotMatch(r.stderr, /ENOENT|''/);
      const [heading, ...problems] = r.stderr.trim().split('\n');
      assert.match(
        heading,
        new RegExp(`^${entry.name}: invalid configuration \\(\\d+ problems?; nothing started\\):$`),
      );
      assert.ok(
        problems.some((l) => /^ {2}LOG_LEVEL must be one of/.test(l)),
        r.stderr,
      );
      // An empty path is no path: not half a certificate pair, not a file that cannot be read.
      assert.doesNotMatch(r.stderr, /TEMPORAL_TLS_CLIENT_/);
      for (const line of problems.filter((l) => !/^ {2}LOG_LEVEL /.test(l)))
        assert.match(line, /^ {2}[A-Z][A-Z0-9_]+(?::| must be set| or [A-Z_]+ must be set)/, r.stderr);
    });
  }

  it('the three Temporal certificate paths empty: no TLS problem and no file read, only the real mistake', async () => {
    const r = await run('temporal/gateway-worker-main.ts', [], {
      TEMPORAL_TLS_CLIENT_KEY_PATH: '',
      TEMPORAL_TLS_CLIENT_CERT_PATH: '',
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: '',
      AUTH_JWT_SECRET: randomBytes(32).toString('hex'),
      LOG_LEVEL: 'loud',
    });
    assert.equal(r.code, 2, r.stdout + r.stderr);
    assert.deepEqual(r.stderr.trim().split('\n').slice(1), [
      '  LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent',
    ]);
  });
});
