// The backup and restore of docs/DEPLOYMENT.md ("Backing up", "Restoring"), run on the live
// test stack: both databases dumped with pg_dump while it runs, the receipt keys copied, the
// KEKs kept; then restored into fresh databases, and an API started on the restored gateway
// database with the KEKs of the same moment and the restored keys: a managed credential still
// decrypts (the restored API injects it into an upstream call), a receipt signed before the
// backup still verifies against the restored API's published keys, and the facilitator's
// settlement record is there with its transaction; KEKs of another moment do not read it.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import { compactVerify, createLocalJWKSet } from 'jose';
import pg from 'pg';
import { stack } from './support/stack.ts';
import { call, callAt, uniqueName, waitForInvocation } from './support/http.ts';
import { startUpstream, type TestUpstream } from './support/upstream.ts';
import { startApiProcess } from './support/api-process.ts';
import { stackProcessEnv } from './support/worker-process.ts';
import { workflowResult } from './support/workflows.ts';
import { newAccount, newPayTo, newPayer, requirements, settleBody, signPayment } from './support/x402.ts';
import { finalRecord } from './support/facilitator.ts';
import { findSettlement } from '../facilitator/store/records.ts';
import { dropDatabase, ensureDatabase, withDatabase } from '../scripts/lib/postgres.ts';

const run = promisify(execFile);

async function serverMajor(url: string): Promise<number> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ server_version_num: string }>('show server_version_num');
    return Math.floor(Number(rows[0].server_version_num) / 10000);
  } finally {
    await client.end();
  }
}

/**
 * The folder of a pg_dump and pg_restore of `major` or newer, as the guide says to find them:
 * PG_BINDIR, Debian's /usr/lib/postgresql/N/bin (newest first), then PATH.
 */
async function clientTools(major: number): Promise<string | undefined> {
  const debian = existsSync('/usr/lib/postgresql')
    ? readdirSync('/usr/lib/postgresql')
        .sort((a, b) => Number(b) - Number(a))
        .map((v) => `/usr/lib/postgresql/${v}/bin`)
    : [];
  const dirs = [process.env.PG_BINDIR, ...debian, ...(process.env.PATH ?? '').split(delimiter)].filter(Boolean);
  for (const dir of dirs as string[]) {
    if (!existsSync(join(dir, 'pg_dump')) || !existsSync(join(dir, 'pg_restore'))) continue;
    const { stdout } = await run(join(dir, 'pg_dump'), ['--version']);
    const version = Number(/(\d+)\.\d+/.exec(stdout)?.[1]);
    if (version >= major) return dir;
  }
  return undefined;
}

describe('backup and restore (docs/DEPLOYMENT.md)', function () {
  this.timeout(180_000);
  let bin: string;
  let upstream: TestUpstream;
  let api: ChildProcess | undefined;
  const restored = { gateway: '', facilitator: '' };

  before(async function () {
    const major = await serverMajor(stack().infra.databaseUrl);
    const found = await clientTools(major);
    // The embedded PostgreSQL (no server on 127.0.0.1:5432) ships no pg_dump: without client
    // tools of its version there is nothing to run (docs/DEPLOYMENT.md says where to get them).
    if (!found) {
      console.log(`    (no pg_dump/pg_restore ${major} or newer: set PG_BINDIR to run this test)`);
      this.skip();
    }
    bin = found;
    upstream = await startUpstream();
  });

  after(async () => {
    if (api && api.exitCode === null) api.kill('SIGKILL');
    await upstream?.close();
    for (const url of [restored.gateway, restored.facilitator]) if (url) await dropDatabase(url).catch(() => undefined);
  });

  it('restores both databases, the KEKs and the receipt keys: a credential decrypts, a receipt verifies, a settlement is there', async () => {
    const s = stack();
    const tenant = `tenant-backup-${randomBytes(4).toString('hex')}`;
    const token = await s.token(tenant);
    const secret = `backup-secret-${randomBytes(8).toString('hex')}`;

    // What a running system holds: a managed credential, an agent using it that emits receipts,
    // a completed call with its receipt, and a settlement.
    const credential = await call('POST', '/v1/credentials', {
      token,
      json: { name: uniqueName('cred'), auth_type: 'bearer', source: 'managed', plaintext: secret },
    });
    assert.equal(credential.status, 201, credential.text);
    const agent = await call('POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('backup'),
        upstream_url: upstream.url,
        credential_ref: credential.json.id,
        emit_receipts: true,
      },
    });
    assert.equal(agent.status, 201, agent.text);
    const invoked = await call('POST', `/v1/proxy/${agent.json.id}`, { token, body: 'before the backup' });
    assert.equal(invoked.status, 202, invoked.text);
    const invocationId = invoked.json.invocation_id as string;
    await waitForInvocation(token, agent.json.id, invocationId);
    await workflowResult(invocationId);
    const receipt = await call('GET', `/v1/invocations/${invocationId}/receipt`, { token });
    assert.equal(receipt.status, 200, receipt.text);

    const account = await newAccount(`backup-${randomBytes(4).toString('hex')}`);
    const payTo = newPayTo();
    const payment = await signPayment(await newPayer(), { payTo, value: 1_000n });
    const settled = await account.client.post('/settle', settleBody(payment, requirements(payTo, 1_000n)));
    await account.client.close();
    assert.equal(settled.json.success, true, JSON.stringify(settled.json));
    const { rows } = await s.facilitator.pool.query<{ settlement_key: string }>(
      'select settlement_key from settlements where tx_hash = $1',
      [settled.json.transaction],
    );
    const settlementKey = rows[0].settlement_key;
    assert.equal((await finalRecord(s.facilitator.pool, settlementKey)).status, 'settled');

    // Backup, while the system runs: the guide's commands.
    const backup = mkdtempSync(join(tmpdir(), 'backup-'));
    for (const [name, url] of [
      ['gateway', s.infra.databaseUrl],
      ['facilitator', s.infra.facilitatorDatabaseUrl],
    ] as const)
      await run(join(bin, 'pg_dump'), ['--format=custom', `--file=${join(backup, `${name}.dump`)}`, `--dbname=${url}`]);
    cpSync(s.config.receipts.keysDir, join(backup, 'receipt-keys'), { recursive: true });
    // The KEKs live in the secret store, apart from the dumps: the value the processes run with.
    const keks = stackProcessEnv().VAULT_KEKS!;

    // Restore into fresh databases, the KEKs of the same moment beside them.
    const suffix = randomBytes(4).toString('hex');
    restored.gateway = withDatabase(s.infra.databaseUrl, `restored_gw_${suffix}`);
    restored.facilitator = withDatabase(s.infra.facilitatorDatabaseUrl, `restored_fac_${suffix}`);
    for (const [name, url] of [
      ['gateway', restored.gateway],
      ['facilitator', restored.facilitator],
    ] as const) {
      await ensureDatabase(url);
      await run(join(bin, 'pg_restore'), [
        '--no-owner',
        '--no-acl',
        '--exit-on-error',
        `--dbname=${url}`,
        join(backup, `${name}.dump`),
      ]);
    }
    const keysDir = join(mkdtempSync(join(tmpdir(), 'restored-')), 'receipt-keys');
    cpSync(join(backup, 'receipt-keys'), keysDir, { recursive: true });

    const started = await startApiProcess({
      DATABASE_URL: restored.gateway,
      VAULT_KEKS: keks,
      RECEIPT_KEYS_DIR: keysDir,
    });
    api = started.child;

    // The managed credential decrypts: the restored API injects it into a (streaming) call.
    const marker = `after the restore ${randomBytes(4).toString('hex')}`;
    const streamed = await callAt(started.url, 'POST', `/v1/proxy/${agent.json.id}/stream`, { token, body: marker });
    assert.equal(streamed.status, 200, streamed.text);
    const seen = upstream.received.find((r) => r.body.toString() === marker);
    assert.ok(seen, 'the upstream was called through the restored API');
    assert.equal(seen.headers.authorization, `Bearer ${secret}`);

    // The receipt signed before the backup verifies against the restored API's published keys.
    const again = await callAt(started.url, 'GET', `/v1/invocations/${invocationId}/receipt`, { token });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.json.receipt, receipt.json.receipt);
    const jwks = await callAt(started.url, 'GET', '/.well-known/jwks.json');
    const { payload } = await compactVerify(again.json.receipt, createLocalJWKSet(jwks.json));
    assert.equal(JSON.parse(new TextDecoder().decode(payload)).invocation_id, invocationId);

    // The KEKs of another moment (the same id, another key) do not read the restored credential.
    api.kill('SIGTERM');
    const other = await startApiProcess({
      DATABASE_URL: restored.gateway,
      VAULT_KEKS: `dev:${randomBytes(32).toString('base64')}`,
      RECEIPT_KEYS_DIR: keysDir,
    });
    api = other.child;
    const unread = `with other keys ${randomBytes(4).toString('hex')}`;
    const refused = await callAt(other.url, 'POST', `/v1/proxy/${agent.json.id}/stream`, { token, body: unread });
    assert.notEqual(refused.status, 200, refused.text);
    assert.ok(!refused.text.includes(secret));
    assert.ok(!upstream.received.some((r) => r.body.toString() === unread), 'nothing sent without the credential');

    // The settlement record, with its transaction, in the restored facilitator database.
    const pool = new pg.Pool({ connectionString: restored.facilitator, max: 1 });
    try {
      const record = await findSettlement(pool, settlementKey);
      assert.ok(record, 'the settlement record is there');
      assert.equal(record.status, 'settled');
      assert.equal(record.txHash, settled.json.transaction);
    } finally {
      await pool.end();
    }
  });
});
