// The secret canary across processes. Unique canary values are configured as every kind of
// secret the system holds: a managed credential's plaintext, an OpenBao secret, the gateway's
// JWT signing secret (and the bearer tokens it signs), a facilitator client key (stored as a
// credential), the payer's private key and the payment signature of a paid call, the
// facilitator's gas-wallet key and receiver-authorizer key (a batch-settlement claim signed with
// it), and another tenant's OpenBao secret that this tenant aims at
// (refused references on create and PUT, and a row planted by SQL that points there). Traffic then runs through a real gateway worker process (its
// stdout read at trace level, its /metrics scraped), an in-process API and facilitator whose
// every log line is kept, the stack's facilitator worker and the chain: credentials injected
// upstream on both endpoints, refused and failed calls, a paid call settled on chain and its
// replay. No canary may appear in an API response, a log line, a Temporal history, search
// attribute or memo of the workflows created, or any /metrics output; the other tenant's
// secret not even in what the upstream received.
// (test/management/credentials.test.ts keeps the credential canary out of 500 paths and the in-process
// worker's SDK log; this file adds the other secrets, real processes, payments and metrics.)
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Wallet } from 'ethers';
import { pino } from 'pino';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { callAt, uniqueName, type Reply } from '../support/http.ts';
import { vaultWrite } from '../support/catalog.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startWorkerProcess, stopWorkerProcess } from '../support/worker-process.ts';
import { newAccount, newPayTo, newPayer, signPayment, encodePayment, type TestAccount } from '../support/x402.ts';
import { facilitatorEnv } from '../support/facilitator.ts';
import { batchPayer } from '../support/batch-settlement.ts';
import { batchActionKey } from '../../facilitator/store/records.ts';
import { claimBatchDigestOf } from '../../facilitator/settlement/verify-batch.ts';
import { freePort } from '../../scripts/lib/ports.ts';
import { startGateway } from '../../api/wiring.ts';
import { mintToken } from '../../scripts/lib/tokens.ts';
import { loadFacilitatorConfig } from '../../facilitator/config.ts';
import { startFacilitator, type RunningFacilitator } from '../../facilitator-service/server.ts';
import { workflowResult } from '../support/workflows.ts';

type Json = Record<string, any>;

const canary = (kind: string) => `${kind}-CANARY-${randomBytes(12).toString('hex')}`;

/** A pino logger at trace level with no destination but `lines`: what reaches it is what the code logged. */
function capture(name: string, lines: string[]) {
  return pino({ name, level: 'trace' }, { write: (chunk: string) => void lines.push(chunk) });
}

/** A real gateway worker process on its own task queue, logging at trace level, with a metrics port. */
function startCanaryWorker(
  taskQueue: string,
  jwtSecret: string,
  metricsPort: number,
  lines: string[],
): Promise<ChildProcess> {
  const s = stack();
  const keyring = [...s.config.vault.keyring.keys.entries()]
    .map(([id, key]) => `${id}:${key.toString('base64')}`)
    .join(',');
  return startWorkerProcess(
    taskQueue,
    {
      AUTH_JWT_SECRET: jwtSecret,
      VAULT_KEKS: keyring,
      VAULT_KEK_CURRENT: s.config.vault.keyring.current,
      TOKEN_ADDRESS: s.infra.tokenAddress,
      RECEIPT_KEYS_DIR: s.config.receipts.keysDir,
      WORKER_METRICS_PORT: String(metricsPort),
      LOG_LEVEL: 'trace',
    },
    (chunk) => lines.push(chunk),
  );
}

describe('secret canary: no secret leaves through responses, logs, Temporal or metrics', function () {
  this.timeout(300_000);
  const secrets: Record<string, string> = {};
  const replies: Reply[] = [];
  const apiLines: string[] = [];
  const facilitatorLines: string[] = [];
  const workerLines: string[] = [];
  const taskQueue = `canary-${randomUUID()}`;
  const tenant = `tenant-canary-${randomUUID()}`;
  const victim = `tenant-victim-${randomUUID()}`;
  let worker: ChildProcess | undefined;
  let workerMetricsPort: number;
  let api: Server;
  let apiUrl: string;
  let facilitator: RunningFacilitator;
  let upstream: TestUpstream;
  let account: TestAccount;
  let token: string;
  let payerAddress: string;
  const workflowIds: string[] = [];
  /** Settlement workflows not found by the payer (a batch-settlement claim's, named by its key). */
  const settlementIds: string[] = [];

  before(async function () {
    this.timeout(240_000);
    upstream = await startUpstream();
    secrets.managed = canary('MANAGED');
    secrets.vault = canary('VAULT');
    secrets.victimVault = canary('VICTIMVAULT');
    secrets.jwtSecret = canary('JWTSECRET');
    token = await mintToken({ secret: secrets.jwtSecret, tenant, user: 'canary-user' });
    secrets.bearerToken = token;
    // The token's signature part alone is secret too (header and claims are not).
    secrets.bearerSignature = token.split('.')[2];

    workerMetricsPort = await freePort();
    worker = await startCanaryWorker(taskQueue, secrets.jwtSecret, workerMetricsPort, workerLines);
    const config = stack().config;
    api = await startGateway(
      {
        ...config,
        port: 0,
        auth: { ...config.auth, jwtSecret: secrets.jwtSecret },
        temporal: { ...config.temporal, taskQueue },
      },
      stack().orm,
      stack().temporal,
      capture('api', apiLines),
    );
    apiUrl = `http://127.0.0.1:${(api.address() as AddressInfo).port}`;

    // A facilitator front end whose logs are kept; settlements run on the stack's facilitator worker.
    const fconfig = loadFacilitatorConfig(facilitatorEnv(stack().infra, { FACILITATOR_EMBEDDED_WORKER: 'false' }));
    facilitator = await startFacilitator(fconfig, {
      pool: stack().facilitator.pool,
      temporal: stack().temporal,
      log: capture('facilitator', facilitatorLines),
    });
    account = await newAccount(`canary-${randomUUID()}`);
    secrets.facilitatorClientKey = account.cert.keyPem
      .replace(/-----[A-Z ]+-----/g, '')
      .replace(/\s+/g, '')
      .slice(0, 64);

    const gas = stack().infra.gasWallet;
    const gasWallet = await Wallet.fromEncryptedJson(
      await readFile(gas.keystoreFile, 'utf8'),
      (await readFile(gas.passwordFile, 'utf8')).trim(),
    );
    secrets.gasWalletKey = gasWallet.privateKey.slice(2);
    const authorizer = stack().infra.receiverAuthorizer;
    const authorizerWallet = await Wallet.fromEncryptedJson(
      await readFile(authorizer.keystoreFile, 'utf8'),
      (await readFile(authorizer.passwordFile, 'utf8')).trim(),
    );
    secrets.receiverAuthorizerKey = authorizerWallet.privateKey.slice(2);
  });

  after(async () => {
    if (worker) await stopWorkerProcess(worker);
    api?.closeAllConnections();
    await new Promise((r) => api?.close(r));
    await facilitator?.close();
    await account?.client.close();
    await upstream?.close();
  });

  const send = async (
    method: string,
    path: string,
    opts: { json?: unknown; body?: string; headers?: Record<string, string>; as?: string } = {},
  ) => {
    const res = await callAt(apiUrl, method, path, {
      token: opts.as ?? token,
      json: opts.json,
      body: opts.body,
      headers: opts.headers,
    });
    replies.push(res);
    return res;
  };
  const created = async (path: string, json: unknown) => {
    const res = await send('POST', path, { json });
    assert.equal(res.status, 201, res.text);
    return res.json as Json;
  };
  const waitDone = async (agentId: string, invocationId: string) => {
    await workflowResult(invocationId);
    const res = await send('GET', `/v1/proxy/${agentId}/invocations/${invocationId}`);
    assert.ok(['succeeded', 'failed'].includes(res.json.status), res.text);
    return res.json as Json;
  };

  it('drives credentials, refusals, a paid call and its replay through every process', async () => {
    // Credentials: managed, in OpenBao, and the facilitator's client certificate and key.
    const vaultPath = `tenants/${tenant}/canary/${randomUUID()}`;
    await vaultWrite(vaultPath, { token: secrets.vault });
    const victimPath = `tenants/${victim}/canary`;
    await vaultWrite(victimPath, { token: secrets.victimVault });
    const managed = await created('/v1/credentials', {
      name: 'managed',
      auth_type: 'bearer',
      source: 'managed',
      plaintext: secrets.managed,
    });
    const vaulted = await created('/v1/credentials', {
      name: 'vaulted',
      auth_type: 'api_key',
      source: 'vault',
      vault_ref: `secret/data/${vaultPath}#token`,
    });
    const tls = await created('/v1/credentials', {
      name: 'facilitator',
      auth_type: 'none',
      source: 'managed',
      plaintext: `${account.cert.certPem}\n${account.cert.keyPem}`,
    });
    await send('GET', '/v1/credentials');
    await send('PUT', `/v1/credentials/${managed.id}`, { json: { plaintext: secrets.managed } });
    const config = await send('PUT', '/v1/settlement/config', {
      json: { facilitator_url: facilitator.url, facilitator_credential_ref: tls.id },
    });
    assert.equal(config.status, 201, config.text);

    // Refusals that carry a secret in the request.
    await send('POST', '/v1/credentials', {
      json: { name: 'bad', auth_type: 'bearer', source: 'managed', plaintext: `${secrets.managed}\n` },
    });
    await send('POST', '/v1/credentials', {
      json: { name: 'managed', auth_type: 'bearer', source: 'managed', plaintext: secrets.managed },
    });
    await send('PUT', `/v1/credentials/${vaulted.id}`, { json: { plaintext: secrets.vault } });
    await send('GET', '/v1/agents', { as: `${token}x` });
    await send('GET', '/v1/agents', { as: await mintToken({ secret: secrets.jwtSecret, tenant: '', user: 'u' }) });

    // Credentials injected upstream, on both endpoints; the caller's own token never follows.
    const workflows: string[] = [];
    for (const [credential, emit] of [
      [managed.id, true],
      [vaulted.id, false],
    ] as const) {
      const agent = await created('/v1/agents', {
        name: uniqueName('canary'),
        upstream_url: upstream.url,
        credential_ref: credential,
        emit_receipts: emit,
        capture_body: true,
      });
      const invoked = await send('POST', `/v1/proxy/${agent.id}`, {
        body: 'transactional',
        headers: { 'x-gateway-model': 'canary-model' },
      });
      assert.equal(invoked.status, 202, invoked.text);
      workflows.push(invoked.json.invocation_id);
      assert.equal((await waitDone(agent.id, invoked.json.invocation_id)).status, 'succeeded');
      if (emit) await send('GET', `/v1/invocations/${invoked.json.invocation_id}/receipt`);
      const streamed = await send('POST', `/v1/proxy/${agent.id}/stream`, { body: 'streaming' });
      assert.equal(streamed.status, 200, streamed.text);
    }
    // A failing injection: the vault has no such field.
    const missing = await created('/v1/credentials', {
      name: 'missing',
      auth_type: 'bearer',
      source: 'vault',
      vault_ref: `secret/data/${vaultPath}#nope`,
    });
    const broken = await created('/v1/agents', {
      name: uniqueName('canary'),
      upstream_url: upstream.url,
      credential_ref: missing.id,
    });
    const failed = await send('POST', `/v1/proxy/${broken.id}`, { body: 'fails' });
    workflows.push(failed.json.invocation_id);
    assert.equal((await waitDone(broken.id, failed.json.invocation_id)).status, 'failed');

    // Another tenant's vault secret: refused as a reference on create and on PUT, and a row
    // planted by SQL that points at it resolves nowhere, on both endpoints.
    const victimRef = `secret/data/${victimPath}#token`;
    assert.equal(
      (
        await send('POST', '/v1/credentials', {
          json: { name: 'victim', auth_type: 'bearer', source: 'vault', vault_ref: victimRef },
        })
      ).status,
      400,
    );
    assert.equal((await send('PUT', `/v1/credentials/${vaulted.id}`, { json: { vault_ref: victimRef } })).status, 400);
    const planted = await created('/v1/credentials', {
      name: 'planted',
      auth_type: 'bearer',
      source: 'vault',
      vault_ref: `secret/data/${vaultPath}#token`,
    });
    await stack()
      .orm.em.fork()
      .getConnection()
      .execute('update credentials set vault_ref = ? where id = ?', [victimRef, planted.id]);
    const aimed = await created('/v1/agents', {
      name: uniqueName('canary-aimed'),
      upstream_url: upstream.url,
      credential_ref: planted.id,
    });
    const aimedCall = await send('POST', `/v1/proxy/${aimed.id}`, { body: 'aimed' });
    workflows.push(aimedCall.json.invocation_id);
    assert.equal((await waitDone(aimed.id, aimedCall.json.invocation_id)).status, 'failed');
    assert.equal((await send('POST', `/v1/proxy/${aimed.id}/stream`, { body: 'aimed stream' })).status, 502);

    // A paid call, settled on chain through the captured facilitator, then replayed.
    const payer = await newPayer(1_000_000n);
    payerAddress = payer.address;
    secrets.payerKey = payer.privateKey.slice(2);
    const payTo = newPayTo();
    const priced = await created('/v1/agents', {
      name: uniqueName('canary-paid'),
      upstream_url: upstream.url,
      credential_ref: managed.id,
      pricing: { amount: '2500', asset: 'USDC', network: 'base', pay_to: payTo },
    });
    const payment = await signPayment(payer, { payTo, value: 2500n });
    secrets.paymentSignature = payment.payload.signature.slice(2).toLowerCase();
    const header = encodePayment(payment);
    const paid = await send('POST', `/v1/proxy/${priced.id}`, { body: 'paid', headers: { 'x-payment': header } });
    assert.equal(paid.status, 202, paid.text);
    assert.ok(paid.headers['x-payment-response'], 'settled before forwarding');
    workflows.push(paid.json.invocation_id);
    assert.equal((await waitDone(priced.id, paid.json.invocation_id)).status, 'succeeded');
    const replay = await send('POST', `/v1/proxy/${priced.id}`, {
      body: 'paid again',
      headers: { 'x-payment': header },
    });
    assert.equal(replay.status, 402, replay.text);
    const streamPayment = await signPayment(payer, { payTo, value: 2500n });
    secrets.streamPaymentSignature = streamPayment.payload.signature.slice(2).toLowerCase();
    const paidStream = await send('POST', `/v1/proxy/${priced.id}/stream`, {
      body: 'paid stream',
      headers: { 'x-payment': encodePayment(streamPayment) },
    });
    assert.equal(paidStream.status, 200, paidStream.text);

    // batch-settlement through the facilitator: a deposit, then a claim the facilitator signs with
    // the receiver-authorizer key (whose canary this is) in its settlement's step 2.
    const channelPayTo = newPayTo();
    const channelPayer = batchPayer((await newPayer(20_000n)).privateKey);
    const deposit = await channelPayer.pay({
      asset: stack().infra.tokenAddress,
      payTo: channelPayTo,
      receiverAuthorizer: stack().infra.receiverAuthorizer.address,
      amount: 1_000n,
      minDeposit: 10_000n,
    });
    const channelSettle = async (payload: unknown) => {
      const body = { x402Version: 2, paymentPayload: { ...deposit, payload }, paymentRequirements: deposit.accepted };
      const res = await account.client.post('/settle', body, facilitator.url);
      replies.push({ ...res, text: JSON.stringify(res.json) });
      assert.equal(res.json.success, true, JSON.stringify(res.json));
    };
    await channelSettle(deposit.payload);
    const claims = [
      {
        voucher: {
          channel: deposit.payload.channelConfig,
          maxClaimableAmount: deposit.payload.voucher.maxClaimableAmount,
        },
        signature: deposit.payload.voucher.signature,
        totalClaimed: deposit.payload.voucher.maxClaimableAmount,
      },
    ];
    await channelSettle({ type: 'claim', claims });
    // Its key as the facilitator stored it (it names the UTC day the claim was asked on).
    const claimKeys = await stack().facilitator.pool.query<{ settlement_key: string }>(
      `select settlement_key from settle_requests where starts_with(settlement_key, $1)`,
      [batchActionKey(8453, stack().infra.tokenAddress, channelPayTo, 'claim', `${claimBatchDigestOf(8453, claims)}-`)],
    );
    assert.equal(claimKeys.rows.length, 1);
    settlementIds.push(claimKeys.rows[0]!.settlement_key);

    // Positive controls: the secrets were really in play.
    assert.ok(
      upstream.received.some((r) => r.headers.authorization === `Bearer ${secrets.managed}`),
      'the managed secret reached the upstream',
    );
    assert.ok(
      upstream.received.some((r) => r.headers['x-api-key'] === secrets.vault),
      'the vault secret reached the upstream',
    );
    assert.ok(
      upstream.received.every((r) => !JSON.stringify(r.headers).includes(secrets.bearerSignature)),
      "the caller's token went upstream",
    );
    assert.ok(workerLines.join('').includes('invocation completed'), 'the worker process logged the invocations');
    assert.ok(facilitatorLines.length > 0 && apiLines.length > 0, 'the API and the facilitator logged');
    assert.ok(
      replies.some((r) => r.status === 400) &&
        replies.some((r) => r.status === 401) &&
        replies.some((r) => r.status === 409),
    );
    workflowIds.push(...workflows);
  });

  it('finds no canary in responses, logs, Temporal histories, search attributes, memos or metrics', async () => {
    const haystacks: Array<[string, string]> = [];
    for (const r of replies) haystacks.push([`a ${r.status} response`, `${JSON.stringify(r.headers)}\n${r.text}`]);
    haystacks.push(
      ['the API log', apiLines.join('')],
      ['the facilitator log', facilitatorLines.join('')],
      ['the worker process log', workerLines.join('')],
    );

    // Every workflow of the tenant (invocations) and of the payer (settlements).
    const ids = new Set<string>();
    for await (const wf of stack().temporal.workflow.list({ query: `TenantId = '${tenant}'` })) ids.add(wf.workflowId);
    for await (const wf of stack().temporal.workflow.list({ query: `Payer = '${payerAddress.toLowerCase()}'` }))
      ids.add(wf.workflowId);
    assert.ok(
      workflowIds.every((id) => ids.has(id)),
      'every invocation workflow was found by its tenant',
    );
    for (const id of settlementIds) ids.add(id);
    assert.ok(
      [...ids].some((id) => id.startsWith('settle:')),
      'the settlement workflow was found',
    );
    for (const id of ids) {
      const handle = stack().temporal.workflow.getHandle(id);
      haystacks.push([`the history of ${id}`, JSON.stringify(await handle.fetchHistory())]);
      const d = await handle.describe();
      haystacks.push([
        `the search attributes and memo of ${id}`,
        JSON.stringify({
          sa: d.searchAttributes,
          typed: d.typedSearchAttributes.getAll(),
          memo: d.memo ?? null,
          summary: d.staticSummary ?? null,
        }),
      ]);
    }

    const scrape = async (url: string) => {
      const res = await request(url);
      const text = await res.body.text();
      assert.equal(res.statusCode, 200, url);
      return text;
    };
    haystacks.push(['the API /metrics', await scrape(stack().metricsUrl)]);
    haystacks.push(['the worker process /metrics', await scrape(`http://127.0.0.1:${workerMetricsPort}/metrics`)]);

    const leaksIn = (pairs: Array<[string, string]>) => {
      const found: string[] = [];
      for (const [where, text] of pairs) {
        const lower = text.toLowerCase();
        for (const [kind, secret] of Object.entries(secrets)) {
          if (text.includes(secret) || lower.includes(secret.toLowerCase())) found.push(`${kind} in ${where}`);
        }
      }
      return found;
    };
    // Control: the search does find the secrets where they legitimately are.
    const upstreamSaw = JSON.stringify(upstream.received.map((r) => r.headers));
    assert.deepEqual(leaksIn([['the upstream', upstreamSaw]]).sort(), [
      'managed in the upstream',
      'vault in the upstream',
    ]);
    assert.ok(leaksIn([['a token', `Bearer ${token}`]]).includes('bearerToken in a token'));
    assert.deepEqual(leaksIn(haystacks), [], 'secrets leaked');
    assert.ok(haystacks.length > 40, `haystacks: ${haystacks.length}`);
  });
});
