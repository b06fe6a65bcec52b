// Streaming invocations and their records: a receipt for every completed streaming call of an
// agent with emit_receipts (digests of both bodies taken as they passed, the receipt stored
// with the row's completion, verified with the published keys), none without it; and the row
// writer's guarantees: a batch one bad row breaks is written row by row, so the others stay,
// and a completion stands on its own (with or without its start).
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { waitFor } from '../support/wait.ts';
import { call } from '../support/http.ts';
import {
  createAgent,
  invocationRow,
  rawUpstream,
  readAll,
  waitForRow,
  type RawUpstream,
} from '../support/proxy-helpers.ts';
import { verifyReceipt } from '../../gateway/receipts/receipt.ts';
import { createInvocationRecorder, type StartedRow } from '../../gateway/invocations/stream-records.ts';

const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

async function receiptOf(token: string, invocationId: string, timeoutMs = 10_000): Promise<any> {
  let status = 0;
  return waitFor(
    async () => {
      const res = await call('GET', `/v1/invocations/${invocationId}/receipt`, { token });
      status = res.status;
      return status === 200 && res.json;
    },
    { timeoutMs, everyMs: 50, what: `the receipt of ${invocationId}`, state: () => `answered ${status}` },
  );
}

describe('streaming receipts and row writes', () => {
  let up: RawUpstream;
  let token: string;
  const answer = Buffer.from('data: one\n\ndata: two\n\n');

  before(async () => {
    token = await stack().token(`tenant-srcpt-${randomUUID()}`);
    up = await rawUpstream((req, res) => {
      void readAll(req).then((body) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(answer.subarray(0, 11));
        setTimeout(() => res.end(Buffer.concat([answer.subarray(11), Buffer.from(`len=${body.length}`)])), 20);
      });
    });
  });
  after(() => up.close());

  it('signs a receipt over the digests of both bodies as they passed, stored with the completion', async () => {
    const agentId = await createAgent(token, { upstream_url: up.url, emit_receipts: true });
    const sent = Buffer.from('x'.repeat(200_000));
    // Chunked (no Content-Length): the digest is of the bytes that went up, however they came.
    const res = await request(`${stack().apiUrl}/v1/proxy/${agentId}/stream`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
      body: Readable.from([sent.subarray(0, 70_000), sent.subarray(70_000)]),
    });
    assert.equal(res.statusCode, 200);
    const received = Buffer.from(await res.body.arrayBuffer());
    const invocationId = String(res.headers['x-gateway-invocation-id']);

    const receipt = await receiptOf(token, invocationId);
    const row = await waitForRow(invocationId);
    const jwks = (await call('GET', '/.well-known/jwks.json')).json;
    const { kid, fields } = await verifyReceipt(receipt.receipt, jwks);
    assert.equal(kid, receipt.kid);
    assert.equal(fields.invocation_id, invocationId);
    assert.equal(fields.agent_id, agentId);
    assert.equal(fields.status, 'succeeded');
    assert.equal(fields.upstream_status, 200);
    assert.equal(fields.request_sha256, sha256(sent));
    assert.equal(fields.response_sha256, sha256(received));
    assert.equal(fields.latency_ms, Number(row.latencyMs));
    assert.equal(fields.completed_at, row.completedAt!.toISOString(), 'the receipt says what the row says');
    assert.equal(fields.payment, null);
  });

  it('signs a failed streaming call too, without a response digest when the answer broke off', async () => {
    const broken = await rawUpstream((req, res) => {
      void readAll(req).then(() => {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('partial');
        setTimeout(() => res.socket?.destroy(), 20);
      });
    });
    try {
      const agentId = await createAgent(token, { upstream_url: broken.url, emit_receipts: true });
      const res = await request(`${stack().apiUrl}/v1/proxy/${agentId}/stream`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}` },
        body: 'abc',
      });
      await res.body.dump().catch(() => undefined);
      const invocationId = String(res.headers['x-gateway-invocation-id']);
      const receipt = await receiptOf(token, invocationId);
      const { fields } = await verifyReceipt(receipt.receipt, (await call('GET', '/.well-known/jwks.json')).json);
      assert.equal(fields.status, 'failed');
      assert.equal(fields.request_sha256, sha256('abc'));
      assert.equal(fields.response_sha256, null);
    } finally {
      await broken.close();
    }
  });

  it('issues no receipt for an agent without emit_receipts', async () => {
    const agentId = await createAgent(token, { upstream_url: up.url });
    const res = await request(`${stack().apiUrl}/v1/proxy/${agentId}/stream`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
      body: 'q',
    });
    await res.body.dump();
    const invocationId = String(res.headers['x-gateway-invocation-id']);
    // A receipt commits with its row's completion (gateway/invocations/stream-records.ts): once
    // the row is complete, a receipt that is not there will never be.
    await waitForRow(invocationId);
    assert.equal((await call('GET', `/v1/invocations/${invocationId}/receipt`, { token })).status, 404);
    const row = await invocationRow(invocationId);
    assert.equal(row?.responseSha256 ?? null, null, 'nothing hashed when no receipt is asked for');
  });

  describe('the row writer', () => {
    let agentId: string;
    let tenantId: string;
    before(async () => {
      tenantId = `tenant-rows-${randomUUID()}`;
      agentId = await createAgent(await stack().token(tenantId), { upstream_url: up.url });
    });

    const started = (id = `inv_${randomUUID()}`): StartedRow => ({
      id,
      tenantId,
      agentId,
      status: 'running',
      requestId: randomUUID(),
      caller: 'alice',
      callerKind: 'token',
      model: null,
      contentType: null,
      requestBytes: 1,
      mcpMethod: null,
      mcpTool: null,
      paymentNetwork: null,
      paymentAsset: null,
      paymentAmount: null,
      paymentPayer: null,
      paymentNonce: null,
      paymentTransaction: null,
      createdAt: new Date(),
    });
    const completion = {
      status: 'succeeded' as const,
      upstreamStatus: 200,
      errorClass: null,
      latencyMs: 3,
      ttftMs: 1,
      responseContentType: 'text/plain',
    };

    it('writes a batch that one bad row breaks row by row: the other rows are kept', async () => {
      const recorder = createInvocationRecorder(stack().orm);
      const first = started();
      const good = [started(), started(), started()];
      // A row without a tenant is refused as such (NOT NULL), whatever the batch.
      const bad = { ...started(), tenantId: null as unknown as string };
      // The first row goes at once; the rest queue behind it and go as one batch.
      const writes = [first, good[0], bad, good[1], good[2]].map((row) =>
        recorder.start(row).then(
          () => 'ok',
          (err: Error) => err,
        ),
      );
      const results = await Promise.all(writes);
      assert.deepEqual(
        results.map((r) => r === 'ok'),
        [true, true, false, true, true],
      );
      for (const row of [first, ...good]) assert.equal((await invocationRow(row.id))?.status, 'running', row.id);
      assert.equal(await invocationRow(bad.id), null);
    });

    it('completes a row whose start never came, and never turns a completed row back to running', async () => {
      const recorder = createInvocationRecorder(stack().orm);
      const row = started();
      await recorder.complete({ ...row, ...completion, completedAt: new Date() });
      await recorder.start(row);
      const stored = await invocationRow(row.id);
      assert.equal(stored?.status, 'succeeded');
      assert.equal(stored?.upstreamStatus, 200);

      // Start and completion queued together (behind a write in flight) become one terminal row.
      const other = started();
      const both = [
        recorder.start(started()),
        recorder.start(other),
        recorder.complete({ ...other, ...completion, completedAt: new Date() }),
      ];
      await Promise.all(both);
      assert.equal((await invocationRow(other.id))?.status, 'succeeded');
    });

    it('writes what is queued when closed (a graceful stop): a start held for company and a completion waiting for its batch are committed', async () => {
      const recorder = createInvocationRecorder(stack().orm);
      const running = started();
      const finished = started();
      const writes = [
        recorder.start(running),
        recorder.complete({ ...finished, ...completion, completedAt: new Date() }),
      ];
      await recorder.close();
      await Promise.all(writes);
      assert.equal((await invocationRow(running.id))?.status, 'running');
      assert.equal((await invocationRow(finished.id))?.status, 'succeeded');
    });
  });
});
