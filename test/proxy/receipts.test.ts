// Trust receipts end to end: an agent with emit_receipts, a real invocation through the
// workflow, the receipt fetched, verified against the published JWKS (with this project's
// verifier, independently with plain jose, and offline with `npm run verify-receipt`), its
// fields checked against the request, the upstream's answer and the invocation; a paid
// call's receipt carries the payment; keys rotate without breaking old receipts.
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compactVerify, createLocalJWKSet, decodeProtectedHeader } from 'jose';
import { stack } from '../support/stack.ts';
import { call, uniqueName, waitForInvocation } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { newAccount, newPayTo, newPayer, signPayment, encodePayment, type TestAccount } from '../support/x402.ts';
import { verifyReceipt } from '../../gateway/receipts/receipt.ts';
import { generateKey } from '../../gateway/receipts/keys.ts';
import { createReceiptActivities } from '../../activities/receipts.ts';
import { workflowResult } from '../support/workflows.ts';

const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');

describe('trust receipts', function () {
  this.timeout(120_000);
  let upstream: TestUpstream;
  let token: string;
  let tenant: string;
  const answers = new Map<string, string>();

  before(async () => {
    // The upstream's answer differs per call, so the response digest proves which answer it covers.
    upstream = await startUpstream((req, res) => {
      const answer = JSON.stringify({ answered: req.body.toString(), at: randomUUID() });
      answers.set(req.body.toString(), answer);
      res.setHeader('content-type', 'application/json');
      res.end(answer);
    });
    tenant = `tenant-receipts-${randomUUID()}`;
    token = await stack().token(tenant);
  });
  after(() => upstream.close());

  async function agent(extra: Record<string, unknown> = {}): Promise<string> {
    const created = await call('POST', '/v1/agents', {
      token,
      json: { name: uniqueName('rcpt'), upstream_url: upstream.url, emit_receipts: true, ...extra },
    });
    assert.equal(created.status, 201, created.text);
    return created.json.id;
  }

  /** Invokes, waits for the row, then for the receipt (signed right after, in the workflow). */
  async function invokeForReceipt(agentId: string, body: string, headers: Record<string, string> = {}, as = token) {
    const invoked = await call('POST', `/v1/proxy/${agentId}`, {
      token: as,
      body,
      headers: { 'content-type': 'text/plain', ...headers },
    });
    assert.equal(invoked.status, 202, invoked.text);
    const invocation = await waitForInvocation(as, agentId, invoked.json.invocation_id);
    await workflowResult(invocation.invocation_id);
    const receipt = await call('GET', `/v1/invocations/${invocation.invocation_id}/receipt`, { token: as });
    return { invocation, receipt };
  }

  async function jwks() {
    const res = await call('GET', '/.well-known/jwks.json');
    assert.equal(res.status, 200);
    return res.json as { keys: Array<Record<string, string>> };
  }

  it('signs a receipt for a completed invocation and publishes the key that verifies it', async () => {
    const agentId = await agent();
    const body = `receipt me ${randomUUID()}`;
    const { invocation, receipt } = await invokeForReceipt(agentId, body);
    assert.equal(receipt.status, 200, receipt.text);
    assert.equal(receipt.json.invocation_id, invocation.invocation_id);
    assert.equal(receipt.json.agent_id, agentId);
    assert.equal(receipt.json.alg, 'EdDSA');
    assert.match(receipt.json.receipt, /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/, 'a compact JWS');

    const header = decodeProtectedHeader(receipt.json.receipt);
    assert.equal(header.alg, 'EdDSA');
    assert.equal(header.kid, receipt.json.kid);

    const keys = await jwks();
    const published = keys.keys.find((k) => k.kid === header.kid);
    assert.ok(published, 'the signing key is published');
    assert.deepEqual(Object.keys(published).sort(), ['alg', 'crv', 'kid', 'kty', 'use', 'x']);
    assert.equal(published.kty, 'OKP');
    assert.equal(published.crv, 'Ed25519');
    assert.ok(!('d' in published), 'never the private part');

    // Independently of our verifier: plain jose against the published set.
    const { payload } = await compactVerify(receipt.json.receipt, createLocalJWKSet(keys as never));
    const fields = JSON.parse(new TextDecoder().decode(payload));
    assert.deepEqual((await verifyReceipt(receipt.json.receipt, keys as never)).fields, fields);

    assert.equal(fields.invocation_id, invocation.invocation_id);
    assert.equal(fields.tenant_id, tenant);
    assert.equal(fields.agent_id, agentId);
    assert.equal(fields.status, 'succeeded');
    assert.equal(fields.request_sha256, sha256(body));
    assert.equal(
      fields.response_sha256,
      sha256(answers.get(body)!),
      'the digest of the answer the upstream gave, though the body was not captured',
    );
    assert.equal(invocation.response_body_b64, undefined);
    assert.equal(fields.upstream_status, 200);
    assert.equal(fields.latency_ms, invocation.latency_ms);
    assert.equal(fields.completed_at, new Date(invocation.completed_at).toISOString());
    assert.equal(fields.payment, null);
    assert.ok(!receipt.text.includes(body), 'the receipt carries digests, never the body');
  });

  it('verifies offline with npm run verify-receipt, and refuses a tampered receipt', async () => {
    const agentId = await agent();
    const { receipt } = await invokeForReceipt(agentId, 'offline check');
    const dir = mkdtempSync(join(tmpdir(), 'receipt-'));
    const receiptFile = join(dir, 'receipt.json');
    const jwksFile = join(dir, 'jwks.json');
    writeFileSync(receiptFile, receipt.text);
    writeFileSync(jwksFile, JSON.stringify(await jwks()));
    const run = (file: string, extra: string[] = ['--jwks', jwksFile]) =>
      spawnSync(process.execPath, ['scripts/verify-receipt.ts', file, ...extra], {
        encoding: 'utf8',
        env: { ...process.env, RECEIPT_KEYS_DIR: stack().config.receipts.keysDir },
      });

    const ok = run(receiptFile);
    assert.equal(ok.status, 0, ok.stderr);
    assert.match(ok.stdout, /receipt verified/);
    assert.match(ok.stdout, new RegExp(receipt.json.invocation_id));
    // The bare compact JWS works too, and so do the local key files instead of a JWKS.
    const bare = join(dir, 'receipt.jws');
    writeFileSync(bare, receipt.json.receipt + '\n');
    assert.equal(run(bare, []).status, 0);

    // One changed claim: the signature no longer holds.
    const [h, p, s] = receipt.json.receipt.split('.');
    const fields = JSON.parse(Buffer.from(p, 'base64url').toString());
    fields.upstream_status = 201;
    writeFileSync(
      join(dir, 'tampered.jws'),
      [h, Buffer.from(JSON.stringify(fields)).toString('base64url'), s].join('.'),
    );
    const bad = run(join(dir, 'tampered.jws'));
    assert.equal(bad.status, 1);
    assert.match(bad.stderr, /NOT verified/);
  });

  it('has no receipt for an agent without emit_receipts, for another tenant, or for a malformed id', async () => {
    const quiet = await agent({ emit_receipts: false });
    const { receipt } = await invokeForReceipt(quiet, 'no receipt please');
    assert.equal(receipt.status, 404);
    assert.deepEqual(Object.keys(receipt.json), ['error']);

    const loud = await agent();
    const signed = await invokeForReceipt(loud, 'mine');
    assert.equal(signed.receipt.status, 200);
    const stranger = await stack().token(`other-${randomUUID()}`);
    assert.equal(
      (await call('GET', `/v1/invocations/${signed.invocation.invocation_id}/receipt`, { token: stranger })).status,
      404,
    );
    assert.equal((await call('GET', '/v1/invocations/inv_nope/receipt', { token })).status, 404);
    assert.equal((await call('GET', `/v1/invocations/${signed.invocation.invocation_id}/receipt`)).status, 401);
  });

  it('signs failed invocations too, and the receipt step is in the workflow history (never a body)', async () => {
    const broken = await agent({ upstream_url: 'http://127.0.0.1:1/agent' });
    const body = `to nowhere ${randomUUID()}`;
    const { invocation, receipt } = await invokeForReceipt(broken, body);
    assert.equal(invocation.status, 'failed');
    assert.equal(receipt.status, 200);
    const { fields } = await verifyReceipt(receipt.json.receipt, (await jwks()) as never);
    assert.equal(fields.status, 'failed');
    assert.equal(fields.upstream_status, null);
    assert.equal(fields.response_sha256, null);
    assert.equal(fields.request_sha256, sha256(body));

    const history = await stack().temporal.workflow.getHandle(invocation.invocation_id).fetchHistory();
    const scheduled = (history.events ?? []).flatMap((e) =>
      e.activityTaskScheduledEventAttributes?.activityType?.name
        ? [e.activityTaskScheduledEventAttributes.activityType.name]
        : [],
    );
    assert.ok(scheduled.includes('issueReceipt'), `activities: ${scheduled.join(', ')}`);
    assert.ok(!JSON.stringify(history).includes(body));
  });

  it('is idempotent: a retried receipt activity returns the receipt already signed', async () => {
    const agentId = await agent();
    const { invocation, receipt } = await invokeForReceipt(agentId, 'once only');
    const activities = createReceiptActivities({ orm: stack().orm, receipts: stack().config.receipts });
    assert.deepEqual(await activities.issueReceipt(invocation.invocation_id), { kid: receipt.json.kid });
    const again = await call('GET', `/v1/invocations/${invocation.invocation_id}/receipt`, { token });
    assert.equal(again.json.receipt, receipt.json.receipt);
  });

  it('carries the payment of a paid call: network, payer, amount and transaction hash', async () => {
    const paidTenant = `tenant-receipts-paid-${randomUUID()}`;
    const paidToken = await stack().token(paidTenant);
    const account: TestAccount = await newAccount(`receipts-${randomUUID()}`);
    try {
      const bundle = `${account.cert.certPem}\n${account.cert.keyPem}`;
      const credential = await call('POST', '/v1/credentials', {
        token: paidToken,
        json: { name: 'facilitator-client', auth_type: 'none', source: 'managed', plaintext: bundle },
      });
      assert.equal(credential.status, 201, credential.text);
      const settlement = await call('PUT', '/v1/settlement/config', {
        token: paidToken,
        json: { facilitator_url: stack().facilitator.url, facilitator_credential_ref: credential.json.id },
      });
      assert.equal(settlement.status, 201, settlement.text);
      const payTo = newPayTo();
      const created = await call('POST', '/v1/agents', {
        token: paidToken,
        json: {
          name: uniqueName('rcpt-paid'),
          upstream_url: upstream.url,
          emit_receipts: true,
          pricing: { amount: '1500', asset: 'USDC', network: 'base', pay_to: payTo },
        },
      });
      assert.equal(created.status, 201, created.text);
      const payer = await newPayer(100_000n);
      const payment = await signPayment(payer, { payTo, value: 1500n });
      const { invocation, receipt } = await invokeForReceipt(
        created.json.id,
        'paid call',
        { 'x-payment': encodePayment(payment) },
        paidToken,
      );
      assert.equal(receipt.status, 200, receipt.text);
      const { fields } = await verifyReceipt(receipt.json.receipt, (await jwks()) as never);
      assert.equal(fields.payment?.network, 'base');
      assert.equal(fields.payment?.payer, invocation.payment_payer);
      assert.equal(fields.payment?.payer.toLowerCase(), payer.address.toLowerCase());
      assert.equal(fields.payment?.amount, '1500');
      assert.match(fields.payment?.transaction ?? '', /^0x[0-9a-f]{64}$/);
    } finally {
      await account.client.close();
    }
  });

  it('rotates keys: new receipts use the new key, old receipts still verify against the published set', async () => {
    const agentId = await agent();
    const before = await invokeForReceipt(agentId, 'before rotation');
    const kid = generateKey(stack().config.receipts.keysDir, new Date(Date.now() + 1000));
    const after = await invokeForReceipt(agentId, 'after rotation');
    assert.equal(after.receipt.json.kid, kid);
    assert.notEqual(before.receipt.json.kid, kid);
    const keys = await jwks();
    assert.ok(
      keys.keys.some((k) => k.kid === kid) && keys.keys.some((k) => k.kid === before.receipt.json.kid),
      'both keys published',
    );
    await verifyReceipt(before.receipt.json.receipt, keys as never);
    await verifyReceipt(after.receipt.json.receipt, keys as never);
  });
});
