// docs/DEPLOYMENT.md run as written, on the test stack's PostgreSQL, anvil, OpenBao, Redis and
// Temporal: the separated topology (API, gateway worker, facilitator HTTPS without the gas key,
// facilitator worker), each process started with the entry the guide's table gives, Temporal
// reached over mutual TLS through TEMPORAL_* only (a TLS terminator requiring client
// certificates in front of the stack's dev server), PUBLIC_URL behind a load balancer; the
// secrets made with the guide's own shell block, the receipt keys with its `init`, the bundles
// with `npm run build`. Then the guide's upgrade step 1 (histories exported with the Temporal CLI
// into a folder of their own, replayed with `npm run replay`), its backup while the system runs,
// a SIGTERM to each started PID (the port freed within the guide's grace), and its restore into
// fresh databases: a managed credential still decrypts, a receipt still verifies, the settlement
// is still there, and KEKs of another moment read nothing.
// The guide's blocks run with sh as written; only its example places are replaced by this run's
// own (/etc/agent-gateway, /secure, /backups, ../histories, the address 10.0.0.5, ID).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { compactVerify, createLocalJWKSet } from 'jose';
import pg from 'pg';
import { stack } from '../support/stack.ts';
import { callAt, uniqueName, waitForInvocation } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { workflowResult } from '../support/workflows.ts';
import { startTlsTerminator, type TlsTerminator } from '../support/bare-temporal.ts';
import {
  guideBlock,
  guideInline,
  killGroups,
  runShell,
  startAsGuideSays,
  stopWithin,
  type GuideProcess,
} from '../support/guide.ts';
import { clientTools, serverMajor } from '../support/pg-tools.ts';
import { CHAIN_ID, encodePayment, newPayTo, newPayer, settlingTenant, signPayment } from '../support/x402.ts';
import { freePort } from '../../scripts/lib/ports.ts';
import { ensureTool } from '../../scripts/lib/tools.ts';
import { fund } from '../../scripts/dev/chain.ts';
import { dropDatabase, ensureDatabase, withDatabase } from '../../scripts/lib/postgres.ts';
import { findSettlement, settlementKey } from '../../facilitator/store/records.ts';

// The grace each process is given by docs/DEPLOYMENT.md ("Stopping a process"), with defaults.
const GRACE_MS = {
  api: 30_000 + 10_000,
  gatewayWorker: 35_000 + 10_000,
  facilitatorWorker: 10_000 + 10_000,
  facilitator: 10_000,
};

describe('docs/DEPLOYMENT.md, run as written', function () {
  this.timeout(120_000);
  const dir = mkdtempSync(join(tmpdir(), 'deployment-guide-'));
  const suffix = randomBytes(4).toString('hex');
  const queues = { gateway: `guide-gateway-${suffix}`, facilitator: `guide-facilitator-${suffix}` };
  const restored = { gateway: '', facilitator: '' };
  const processes: Record<string, GuideProcess | undefined> = {};
  let tls: TlsTerminator;
  let upstream: TestUpstream;
  let temporalEnv: Record<string, string>;
  let shared: Record<string, string>;
  let apiEnv: Record<string, string>;
  let apiUrl: string;
  let facilitatorUrl: string;
  // What the calls below leave, for the replay, the backup and the restore.
  const made = { tenant: '', token: '', secret: '', echoAgent: '', invocations: [] as string[], receipt: '' };
  const settlement = { key: '', tx: '' };

  before(async function () {
    this.timeout(240_000);
    const s = stack();
    upstream = await startUpstream();
    // Temporal over mutual TLS: a terminator requiring client certificates of the stack's dev CA.
    tls = await startTlsTerminator(s.infra.pki, s.infra.temporalAddress);
    temporalEnv = {
      TEMPORAL_ADDRESS: tls.address,
      TEMPORAL_NAMESPACE: s.config.temporal.namespace,
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: s.infra.pki.files.ca,
      TEMPORAL_TLS_CLIENT_CERT_PATH: s.infra.pki.files.clientCert,
      TEMPORAL_TLS_CLIENT_KEY_PATH: s.infra.pki.files.clientKey,
      TEMPORAL_TLS_SERVER_NAME: 'localhost',
    };

    // Step 1 of "A TLS Temporal endpoint, step by step": the bundles (a folder of this release's
    // own), the secrets (the guide's block) and the first receipt key.
    const bundles = join(dir, 'bundles');
    const receiptKeys = join(dir, 'receipt-keys');
    const secrets = guideBlock('### Making the gas wallet and the certificates')
      .replaceAll('/etc/agent-gateway', join(dir, 'etc'))
      .replaceAll('/secure', join(dir, 'secure'))
      .replaceAll('10.0.0.5', '127.0.0.1');
    const [, made1, init] = await Promise.all([
      runShell('npm run build', { WORKFLOW_BUNDLE_DIR: bundles, CONSOLE_DIR: join(dir, 'console') }),
      runShell(secrets, {}),
      runShell(guideBlock('## Receipt signing keys').replaceAll('/srv/agent-gateway/receipt-keys', receiptKeys), {}),
    ]);
    assert.match(made1.stdout, /address 0x[0-9a-fA-F]{40}/);
    assert.match(init.stdout, /^added rk-/m);
    const etc = join(dir, 'etc');
    const issued = join(dir, 'secure', 'issued');
    const caFile = join(dir, 'secure', 'facilitator-ca', 'ca-cert.pem');
    const gasWallet = JSON.parse(readFileSync(join(etc, 'gas.json'), 'utf8')) as { address: string };
    await fund(s.infra.chainRpcUrl, s.infra.tokenAddress, `0x${gasWallet.address.replace(/^0x/, '')}`, {
      eth: 10n ** 20n,
    });

    // Step 2: every process gets the connection; step 3: workers and facilitator, then the API.
    const ports = {
      api: await freePort(),
      apiMetrics: await freePort(),
      workerMetrics: await freePort(),
      facilitator: await freePort(),
      facilitatorPublic: await freePort(),
      facilitatorMetrics: await freePort(),
      facilitatorWorkerMetrics: await freePort(),
    };
    const chain = {
      CHAIN_RPC_URL: s.infra.chainRpcUrl,
      CHAIN_ID: String(CHAIN_ID),
      TOKEN_ADDRESS: s.infra.tokenAddress,
    };
    shared = {
      ...temporalEnv,
      // One build id for the run, the stack's (a commit made meanwhile changes nothing).
      TEMPORAL_BUILD_ID: s.config.temporal.version.buildId,
      METRICS_HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
    };
    const facilitatorShared = {
      ...shared,
      ...chain,
      FACILITATOR_DATABASE_URL: s.infra.facilitatorDatabaseUrl,
      FACILITATOR_KEYSTORE_FILE: join(etc, 'gas.json'),
      FACILITATOR_TASK_QUEUE: queues.facilitator,
    };
    const gatewayShared = {
      ...shared,
      DATABASE_URL: s.infra.databaseUrl,
      AUTH_JWT_SECRET: s.infra.secrets.jwtSecret,
      VAULT_KEKS: `dev:${s.infra.secrets.vaultKek}`,
      VAULT_ADDR: s.infra.vault.addr,
      VAULT_TOKEN: s.infra.vault.token,
      RECEIPT_KEYS_DIR: receiptKeys,
      REDIS_URL: s.redisUrl,
      UPSTREAM_ALLOW: '127.0.0.1',
      TEMPORAL_TASK_QUEUE: queues.gateway,
    };
    const production = { NODE_ENV: 'production', WORKFLOW_BUNDLE_DIR: bundles };
    const [facilitatorWorker, facilitator, gatewayWorker] = await Promise.all([
      startAsGuideSays(
        'facilitator worker (the only holder of the gas key)',
        {
          ...facilitatorShared,
          ...production,
          FACILITATOR_KEYSTORE_PASSWORD_FILE: join(etc, 'gas.password'),
          FACILITATOR_WORKER_METRICS_PORT: String(ports.facilitatorWorkerMetrics),
        },
        'facilitator worker running',
        [ports.facilitatorWorkerMetrics],
      ),
      startAsGuideSays(
        'facilitator (HTTPS, mutual TLS)',
        {
          ...facilitatorShared,
          FACILITATOR_EMBEDDED_WORKER: 'false',
          FACILITATOR_HOST: '127.0.0.1',
          FACILITATOR_PORT: String(ports.facilitator),
          FACILITATOR_PUBLIC_PORT: String(ports.facilitatorPublic),
          FACILITATOR_METRICS_PORT: String(ports.facilitatorMetrics),
          FACILITATOR_TLS_CERT: join(issued, 'facilitator-cert.pem'),
          FACILITATOR_TLS_KEY: join(issued, 'facilitator-key.pem'),
          FACILITATOR_TLS_CA: caFile,
        },
        'facilitator listening',
        [ports.facilitator, ports.facilitatorPublic, ports.facilitatorMetrics],
      ),
      startAsGuideSays(
        'gateway worker (one or more)',
        { ...gatewayShared, ...production, WORKER_METRICS_PORT: String(ports.workerMetrics) },
        'gateway worker running',
        [ports.workerMetrics],
      ),
    ]);
    Object.assign(processes, { facilitatorWorker, facilitator, gatewayWorker });
    facilitatorUrl = `https://127.0.0.1:${ports.facilitator}`;
    apiEnv = {
      ...gatewayShared,
      ...chain,
      PORT: String(ports.api),
      HOST: '127.0.0.1',
      API_METRICS_PORT: String(ports.apiMetrics),
      PUBLIC_URL: 'https://gateway.example.com/gw',
      SETTLEMENT_CA_FILE: caFile,
    };
    processes.api = await startAsGuideSays('API (one or more replicas)', apiEnv, 'gateway API listening', [
      ports.api,
      ports.apiMetrics,
    ]);
    apiUrl = `http://127.0.0.1:${ports.api}`;

    // Step 5: the gateway's client certificate (the guide's block issued it) made an account.
    await runShell(
      `npm run facilitator -- accounts add --cert ${join(issued, 'gateway-cert.pem')} --name guide-${suffix}`,
      { FACILITATOR_DATABASE_URL: s.infra.facilitatorDatabaseUrl, TOKEN_ADDRESS: s.infra.tokenAddress },
    );
    made.tenant = `guide-${suffix}`;
    made.token = await settlingTenant(
      made.tenant,
      {
        cert: {
          certPem: readFileSync(join(issued, 'gateway-cert.pem'), 'utf8'),
          keyPem: readFileSync(join(issued, 'gateway-key.pem'), 'utf8'),
        },
      },
      facilitatorUrl,
      apiUrl,
    );
  });

  after(async () => {
    killGroups(Object.values(processes));
    tls?.close();
    await upstream?.close();
    for (const url of [restored.gateway, restored.facilitator]) if (url) await dropDatabase(url).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  });

  it('step 6: a transactional call with a managed credential and a receipt, on the separated gateway worker', async () => {
    made.secret = `guide-secret-${randomBytes(8).toString('hex')}`;
    const credential = await callAt(apiUrl, 'POST', '/v1/credentials', {
      token: made.token,
      json: { name: uniqueName('cred'), auth_type: 'bearer', source: 'managed', plaintext: made.secret },
    });
    assert.equal(credential.status, 201, credential.text);
    const agent = await callAt(apiUrl, 'POST', '/v1/agents', {
      token: made.token,
      json: {
        name: uniqueName('guide'),
        upstream_url: upstream.url,
        credential_ref: credential.json.id,
        emit_receipts: true,
      },
    });
    assert.equal(agent.status, 201, agent.text);
    made.echoAgent = agent.json.id;
    const invoked = await callAt(apiUrl, 'POST', `/v1/proxy/${made.echoAgent}`, { token: made.token, body: 'hello' });
    assert.equal(invoked.status, 202, invoked.text);
    const id = invoked.json.invocation_id as string;
    assert.equal((await waitForInvocation(made.token, made.echoAgent, id, 30_000, apiUrl)).status, 'succeeded');
    made.invocations.push(id);
    assert.equal(upstream.received.at(-1)?.headers.authorization, `Bearer ${made.secret}`);
    const description = await stack().temporal.workflow.getHandle(id).describe();
    assert.equal(description.taskQueue, queues.gateway, "the guide's worker ran it");

    // Signed by the worker as its workflow ends, published by the API: the keys `init` made, read by both.
    await workflowResult(id);
    const receipt = await callAt(apiUrl, 'GET', `/v1/invocations/${id}/receipt`, { token: made.token });
    assert.equal(receipt.status, 200, receipt.text);
    made.receipt = receipt.json.receipt;
    const jwks = await callAt(apiUrl, 'GET', '/.well-known/jwks.json');
    await compactVerify(made.receipt, createLocalJWKSet(jwks.json));
  });

  it('a paid call: the challenge names PUBLIC_URL, and it settles through the facilitator worker', async () => {
    const payTo = newPayTo();
    const agent = await callAt(apiUrl, 'POST', '/v1/agents', {
      token: made.token,
      json: {
        name: uniqueName('guide-priced'),
        upstream_url: upstream.url,
        pricing: { amount: '25000', asset: 'USDC', network: 'base', pay_to: payTo },
      },
    });
    assert.equal(agent.status, 201, agent.text);
    const challenge = await callAt(apiUrl, 'POST', `/v1/proxy/${agent.json.id}`, {
      token: made.token,
      body: 'unpaid',
      headers: { 'x-forwarded-host': 'attacker.example' },
    });
    assert.equal(challenge.status, 402, challenge.text);
    assert.equal(challenge.json.accepts[0].resource, `https://gateway.example.com/gw/v1/proxy/${agent.json.id}`);

    const payer = await newPayer(1_000_000n);
    const payment = await signPayment(payer, { payTo, value: 25_000n });
    const paid = await callAt(apiUrl, 'POST', `/v1/proxy/${agent.json.id}`, {
      token: made.token,
      body: 'paid',
      headers: { 'content-type': 'text/plain', 'x-payment': encodePayment(payment) },
    });
    assert.equal(paid.status, 202, paid.text);
    const settled = JSON.parse(Buffer.from(String(paid.headers['x-payment-response']), 'base64').toString());
    assert.equal(settled.success, true, JSON.stringify(settled));
    const id = paid.json.invocation_id as string;
    assert.equal((await waitForInvocation(made.token, agent.json.id, id, 30_000, apiUrl)).status, 'succeeded');
    made.invocations.push(id);
    settlement.tx = settled.transaction;
    settlement.key = settlementKey(
      CHAIN_ID,
      stack().infra.tokenAddress,
      payer.address,
      payment.payload.authorization.nonce,
    );
    const handle = stack().temporal.workflow.getHandle(settlement.key);
    assert.equal((await handle.result()).status, 'settled');
    assert.equal((await handle.describe()).taskQueue, queues.facilitator, "the guide's facilitator worker ran it");
  });

  it('upgrading, step 1: the histories, exported into a folder of their own, replay on the checkout', async () => {
    const histories = join(dir, 'histories');
    const block = guideBlock('1. **Replay your own histories**');
    const [mkdir, show, replay] = block.split('\n');
    assert.match(show, /temporal workflow show -w ID -o json > \.\.\/histories\/ID\.json/);
    const script = [mkdir, ...[...made.invocations, settlement.key].map((id) => show.replaceAll('ID', id)), replay]
      .join('\n')
      .replaceAll('../histories', histories);
    // The Temporal CLI the project installs, reaching the mutual-TLS endpoint through TEMPORAL_* alone.
    const path = `${dirname(ensureTool('temporal'))}:${process.env.PATH}`;
    const { stdout } = await runShell(script, { ...temporalEnv, PATH: path });
    assert.equal(readdirSync(histories).length, 3);
    assert.equal(stdout.match(/^ok +/gm)?.length, 3, stdout);
    assert.match(stdout, /^ok +\S+ \(SettlementWorkflow, facilitator\)$/m);
    assert.doesNotMatch(stdout, /FAILED|skipped/);
  });

  let backup = '';
  it('backing up, while it runs: the guide commands', async function () {
    const bin = await clientTools(await serverMajor(stack().infra.databaseUrl));
    // The embedded PostgreSQL ships no pg_dump: docs/DEPLOYMENT.md says where to get the tools.
    if (!bin) {
      console.log('    (no pg_dump/pg_restore of the server version: set PG_BINDIR to run the backup and restore)');
      this.skip();
    }
    const root = join(dir, 'backups');
    await runShell(guideBlock('### Backing up').replaceAll('/backups', root), {
      PATH: `${bin}:${process.env.PATH}`,
      DATABASE_URL: stack().infra.databaseUrl,
      FACILITATOR_DATABASE_URL: stack().infra.facilitatorDatabaseUrl,
      RECEIPT_KEYS_DIR: apiEnv.RECEIPT_KEYS_DIR,
      FACILITATOR_KEYSTORE_FILE: join(dir, 'etc', 'gas.json'),
    });
    backup = join(root, readdirSync(root)[0]);
    assert.deepEqual(readdirSync(backup).sort(), [
      'facilitator.dump',
      'gas-wallet.json',
      'gateway.dump',
      'receipt-keys.tgz',
    ]);
  });

  it('SIGTERM to each started PID frees its ports within the guide grace, exit 0', async () => {
    const stops = await Promise.all(
      (
        [
          ['api', GRACE_MS.api],
          ['gatewayWorker', GRACE_MS.gatewayWorker],
          ['facilitator', GRACE_MS.facilitator],
          ['facilitatorWorker', GRACE_MS.facilitatorWorker],
        ] as const
      ).map(async ([name, grace]) => ({ name, ...(await stopWithin(processes[name]!, grace)) })),
    );
    for (const stop of stops)
      assert.equal(stop.code, 0, `${stop.name}: ${processes[stop.name]!.output().slice(-2000)}`);
  });

  it('restoring: a credential decrypts, a receipt verifies, the settlement is there; other KEKs read nothing', async function () {
    if (!backup) this.skip();
    const s = stack();
    const bin = (await clientTools(await serverMajor(s.infra.databaseUrl)))!;
    restored.gateway = withDatabase(s.infra.databaseUrl, `restored_gw_${suffix}`);
    restored.facilitator = withDatabase(s.infra.facilitatorDatabaseUrl, `restored_fac_${suffix}`);
    for (const url of [restored.gateway, restored.facilitator]) await ensureDatabase(url);
    const keysDir = join(dir, 'restored-receipt-keys');
    const env = {
      PATH: `${bin}:${process.env.PATH}`,
      B: backup,
      DATABASE_URL: restored.gateway,
      FACILITATOR_DATABASE_URL: restored.facilitator,
      RECEIPT_KEYS_DIR: keysDir,
    };
    await runShell(guideInline('tar -C "$RECEIPT_KEYS_DIR" -xzf'), env);
    await runShell(guideBlock('2. Restore each database'), env);

    // An API on the restored database, with the KEKs and receipt keys of the backup's moment.
    const restoredApi = { ...apiEnv, DATABASE_URL: restored.gateway, RECEIPT_KEYS_DIR: keysDir };
    processes.api = await startAsGuideSays('API (one or more replicas)', restoredApi, 'gateway API listening', []);
    const marker = `after the restore ${randomBytes(4).toString('hex')}`;
    const streamed = await callAt(apiUrl, 'POST', `/v1/proxy/${made.echoAgent}/stream`, {
      token: made.token,
      body: marker,
    });
    assert.equal(streamed.status, 200, streamed.text);
    const seen = upstream.received.find((r) => r.body.toString() === marker);
    assert.equal(seen?.headers.authorization, `Bearer ${made.secret}`, 'the restored credential decrypts');

    const again = await callAt(apiUrl, 'GET', `/v1/invocations/${made.invocations[0]}/receipt`, { token: made.token });
    assert.equal(again.json.receipt, made.receipt);
    const jwks = await callAt(apiUrl, 'GET', '/.well-known/jwks.json');
    await compactVerify(again.json.receipt, createLocalJWKSet(jwks.json));

    const pool = new pg.Pool({ connectionString: restored.facilitator, max: 1 });
    try {
      const record = await findSettlement(pool, settlement.key);
      assert.equal(record?.status, 'settled');
      assert.equal(record?.txHash, settlement.tx);
    } finally {
      await pool.end();
    }

    // KEKs of another moment (the same id, another key) do not read the restored credential.
    await stopWithin(processes.api, GRACE_MS.api);
    processes.api = await startAsGuideSays(
      'API (one or more replicas)',
      { ...restoredApi, VAULT_KEKS: `dev:${randomBytes(32).toString('base64')}` },
      'gateway API listening',
      [],
    );
    const unread = `with other keys ${randomBytes(4).toString('hex')}`;
    const refused = await callAt(apiUrl, 'POST', `/v1/proxy/${made.echoAgent}/stream`, {
      token: made.token,
      body: unread,
    });
    assert.notEqual(refused.status, 200, refused.text);
    assert.ok(!refused.text.includes(made.secret));
    assert.ok(!upstream.received.some((r) => r.body.toString() === unread), 'nothing sent without the credential');
  });
});
