// The transactional activity's statements (gateway/invocations/store.ts) against the real
// PostgreSQL: the guards that keep a call from being sent twice without the opt-in and a row
// from being completed twice, whoever races (a zombie attempt, abandonInvocation). The
// end-to-end paths are in test/proxy/proxy.test.ts and test/operations/worker-crash.test.ts; a zombie attempt
// racing a retry cannot be produced on cue through Temporal, so the race is played here.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { stack } from '../support/stack.ts';
import { createInvocationStore } from '../../gateway/invocations/store.ts';
import { createPostgresBodyStore } from '../../gateway/body-store.ts';

describe('invocation store (transactional activity statements)', () => {
  const tenant = `tenant-store-${randomUUID()}`;
  const sql = (text: string, params: unknown[] = []) => stack().orm.em.getConnection().execute(text, params);

  async function agent(
    fields: { upstreamUrl?: string | null; credentialRef?: string | null; retryNonIdempotent?: boolean } = {},
  ): Promise<string> {
    const id = `agt_${randomUUID().replaceAll('-', '')}`;
    await sql(
      `insert into agents (id, tenant_id, name, upstream_url, credential_ref, retry_non_idempotent, created_by) values (?, ?, ?, ?, ?, ?, 'u')`,
      [
        id,
        tenant,
        id,
        fields.upstreamUrl === undefined ? 'http://127.0.0.1:9/agent' : fields.upstreamUrl,
        fields.credentialRef ?? null,
        fields.retryNonIdempotent ?? false,
      ],
    );
    return id;
  }

  async function invocation(agentId: string, body?: Buffer): Promise<string> {
    const id = `inv_${randomUUID().replaceAll('-', '')}`;
    const bodyId = body ? await createPostgresBodyStore(stack().orm).put(tenant, 'text/plain', body) : null;
    await sql(
      `insert into invocations (id, tenant_id, agent_id, mode, status, request_id, caller, request_headers, request_body_id) values (?, ?, ?, 'transactional', 'pending', 'req', 'u', ?, ?)`,
      [id, tenant, agentId, JSON.stringify({ 'content-type': 'text/plain' }), bodyId],
    );
    return id;
  }

  const rowOf = async (id: string) =>
    (
      (await sql(
        `select status, attempts, error_class, upstream_status, latency_ms, response_body_id from invocations where id = ?`,
        [id],
      )) as Array<Record<string, unknown>>
    )[0];

  it('loads row, agent and body in one statement and leases the attempt when nothing can stop the call', async () => {
    const store = createInvocationStore(stack().orm);
    const id = await invocation(await agent(), Buffer.from('hello'));
    const loaded = await store.load(id, { withBody: true });
    assert.equal(loaded?.leased, true);
    assert.equal(loaded?.attempts, 0, 'the fields are as loaded, before the lease');
    assert.equal(loaded?.requestBody?.toString(), 'hello');
    assert.deepEqual(loaded?.requestHeaders, { 'content-type': 'text/plain' });
    assert.equal(loaded?.agent?.upstreamUrl, 'http://127.0.0.1:9/agent');
    assert.deepEqual(await rowOf(id), {
      status: 'running',
      attempts: 1,
      error_class: null,
      upstream_status: null,
      latency_ms: null,
      response_body_id: null,
    });
    assert.equal(await store.load(`inv_${randomUUID().replaceAll('-', '')}`, { withBody: true }), undefined);
  });

  it('does not lease an attempt after the first (a retry), unless the agent opted in to re-sending', async () => {
    const store = createInvocationStore(stack().orm);
    const plain = await invocation(await agent());
    const optIn = await invocation(await agent({ retryNonIdempotent: true }));
    for (const id of [plain, optIn]) assert.equal((await store.load(id, { withBody: true }))?.leased, true);
    const retriedPlain = await store.load(plain, { withBody: true });
    assert.equal(retriedPlain?.leased, false);
    assert.equal(retriedPlain?.attempts, 1, 'the retry sees the earlier attempt (and completes the row interrupted)');
    assert.equal((await store.load(optIn, { withBody: true }))?.leased, true);
    assert.equal((await rowOf(plain)).attempts, 1);
    assert.equal((await rowOf(optIn)).attempts, 2);
  });

  it('leaves the lease to the activity when a credential must be resolved or no upstream is set', async () => {
    const store = createInvocationStore(stack().orm);
    const withCredential = await invocation(await agent({ credentialRef: 'cred_x' }));
    const noUpstream = await invocation(await agent({ upstreamUrl: null }));
    for (const id of [withCredential, noUpstream]) {
      assert.equal((await store.load(id, { withBody: true }))?.leased, false);
      assert.deepEqual(await rowOf(id), {
        status: 'pending',
        attempts: 0,
        error_class: null,
        upstream_status: null,
        latency_ms: null,
        response_body_id: null,
      });
    }
  });

  it('lets only one of two racing attempts count itself', async () => {
    const store = createInvocationStore(stack().orm);
    const id = await invocation(await agent({ credentialRef: 'cred_x' }));
    // Both attempts loaded the row before either leased it (a zombie and its retry).
    const [a, b] = [await store.load(id, { withBody: true }), await store.load(id, { withBody: true })];
    const leases = await Promise.all([store.leaseAttempt(id, a!.attempts), store.leaseAttempt(id, b!.attempts)]);
    assert.deepEqual(leases.sort(), ['leased', 'taken']);
    assert.equal((await rowOf(id)).attempts, 1);
  });

  it('completes a row once: a later completion answers the first outcome and changes nothing', async () => {
    const store = createInvocationStore(stack().orm);
    const bodies = createPostgresBodyStore(stack().orm);
    const id = await invocation(await agent());
    await store.load(id, { withBody: true });
    const captured = bodies.insertSql!(tenant, 'application/json', Buffer.from('{"ok":true}'));
    const first = await store.complete(
      id,
      {
        status: 'succeeded',
        errorClass: null,
        upstreamStatus: 200,
        latencyMs: 12,
        ttftMs: 3,
        responseBodyId: captured.id,
        responseContentType: 'application/json',
        responseSha256: 'ab',
      },
      captured,
    );
    assert.deepEqual(first, { status: 'succeeded', upstreamStatus: 200, latencyMs: 12, errorClass: null });
    assert.equal(
      (await bodies.get(tenant, captured.id))?.content.toString(),
      '{"ok":true}',
      'the body committed with the row',
    );
    const second = await store.complete(id, { status: 'failed', errorClass: 'internal' });
    assert.deepEqual(second, first);
    assert.deepEqual(await rowOf(id), {
      status: 'succeeded',
      attempts: 1,
      error_class: null,
      upstream_status: 200,
      latency_ms: '12',
      response_body_id: captured.id,
    });
    assert.equal((await store.load(id, { withBody: true }))?.leased, false, 'a terminal row is never leased again');
    assert.equal(
      await store.complete(`inv_${randomUUID().replaceAll('-', '')}`, { status: 'failed', errorClass: 'internal' }),
      undefined,
    );
  });
});
