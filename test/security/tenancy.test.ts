// Tenancy, authentication and the error contract across the management API: every endpoint
// with another tenant's id answers 404 and changes nothing; a reference to another tenant's
// credential is refused as if absent (400); every endpoint without a valid token is 401 with
// no body; 4xx bodies are exactly `{error}`.
import assert from 'node:assert/strict';
import { SignJWT } from 'jose';
import { stack } from '../support/stack.ts';
import { call, uniqueName, waitForInvocation } from '../support/http.ts';
import { assertEmpty, assertError, clientTlsBundle } from '../support/catalog.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';

describe('tenancy, authentication and errors', () => {
  let upstream: TestUpstream;
  let owner: string;
  let stranger: string;
  let agent: any;
  let credential: any;
  let settlement: any;
  let invocationId: string;

  before(async () => {
    upstream = await startUpstream();
    const suffix = uniqueName('t');
    owner = await stack().token(`tenant-owner-${suffix}`);
    stranger = await stack().token(`tenant-stranger-${suffix}`);
    credential = (
      await call('POST', '/v1/credentials', {
        token: owner,
        json: { name: 'owner-cert', auth_type: 'none', source: 'managed', plaintext: clientTlsBundle() },
      })
    ).json;
    agent = (
      await call('POST', '/v1/agents', {
        token: owner,
        json: { name: 'owner-agent', upstream_url: upstream.url, credential_ref: credential.id },
      })
    ).json;
    settlement = (
      await call('PUT', '/v1/settlement/config', {
        token: owner,
        json: { facilitator_url: 'https://facilitator.example.com', facilitator_credential_ref: credential.id },
      })
    ).json;
    const invoked = await call('POST', `/v1/proxy/${agent.id}`, { token: owner, body: 'owner call' });
    invocationId = invoked.json.invocation_id;
    await waitForInvocation(owner, agent.id, invocationId);
  });
  after(() => upstream.close());

  async function ownerView() {
    return {
      agent: (await call('GET', `/v1/agents/${agent.id}`, { token: owner })).json,
      credential: (await call('GET', `/v1/credentials/${credential.id}`, { token: owner })).json,
      settlement: (await call('GET', '/v1/settlement/config', { token: owner })).json,
      invocation: (await call('GET', `/v1/proxy/${agent.id}/invocations/${invocationId}`, { token: owner })).json,
    };
  }

  it("answers 404 on every endpoint for another tenant's ids and changes nothing", async () => {
    const before = await ownerView();
    const received = upstream.received.length;
    const matrix: Array<[string, string, unknown?]> = [
      ['GET', `/v1/agents/${agent.id}`],
      ['PATCH', `/v1/agents/${agent.id}`, { description: 'hijacked' }],
      ['PATCH', `/v1/agents/${agent.id}`, {}],
      ['DELETE', `/v1/agents/${agent.id}`],
      ['POST', `/v1/agents/${agent.id}/suspend`, { reason: 'x' }],
      ['POST', `/v1/agents/${agent.id}/unsuspend`],
      ['GET', `/v1/credentials/${credential.id}`],
      ['PUT', `/v1/credentials/${credential.id}`, { name: 'hijacked', plaintext: 'hijacked-secret' }],
      ['DELETE', `/v1/credentials/${credential.id}`],
      ['POST', `/v1/proxy/${agent.id}`],
      ['POST', `/v1/proxy/${agent.id}/stream`],
      ['GET', `/v1/proxy/${agent.id}/invocations/${invocationId}`],
      // The stranger has no settlement configuration of its own; the owner's is not theirs.
      ['GET', '/v1/settlement/config'],
      ['DELETE', '/v1/settlement/config'],
    ];
    for (const [method, path, json] of matrix) {
      const res = await call(method, path, { token: stranger, ...(json === undefined ? { body: 'x' } : { json }) });
      assertError(res, 404);
      assert.ok(
        !res.text.includes(agent.id) && !res.text.includes(credential.id),
        'the 404 says nothing about the resource',
      );
    }
    assert.deepEqual(await ownerView(), before);
    assert.equal(upstream.received.length, received, 'nothing was forwarded');
    assert.equal(settlement.tenant_id, before.settlement.tenant_id);
  });

  it("keeps lists to the caller's tenant", async () => {
    const agents = (await call('GET', '/v1/agents?limit=100&status=active', { token: stranger })).json.data;
    const credentials = (await call('GET', '/v1/credentials?limit=100', { token: stranger })).json.data;
    assert.ok(!agents.some((a: any) => a.id === agent.id));
    assert.ok(!credentials.some((c: any) => c.id === credential.id));
    assert.ok(
      (await call('GET', '/v1/credentials?limit=100', { token: owner })).json.data.some(
        (c: any) => c.id === credential.id,
      ),
    );
  });

  it("refuses references to another tenant's credential as if it did not exist (400)", async () => {
    assertError(
      await call('POST', '/v1/agents', {
        token: stranger,
        json: { name: uniqueName(), credential_ref: credential.id },
      }),
      400,
      /credential_ref does not name a credential/,
    );
    const own = (await call('POST', '/v1/agents', { token: stranger, json: { name: uniqueName() } })).json;
    assertError(
      await call('PATCH', `/v1/agents/${own.id}`, { token: stranger, json: { credential_ref: credential.id } }),
      400,
      /credential_ref does not name a credential/,
    );
    assertError(
      await call('PUT', '/v1/settlement/config', {
        token: stranger,
        json: { facilitator_url: 'https://facilitator.example.com', facilitator_credential_ref: credential.id },
      }),
      400,
      /does not name a credential/,
    );
    assertError(await call('GET', '/v1/settlement/config', { token: stranger }), 404);
    // The owner's own references work, and its credential is still protected by them.
    assertError(await call('DELETE', `/v1/credentials/${credential.id}`, { token: owner }), 409);
  });

  it('answers 401 with no body on every endpoint without a valid token, whatever the id', async () => {
    const secret = new TextEncoder().encode(stack().infra.secrets.jwtSecret);
    const noUser = await new SignJWT({ tenant_id: 'tenant-owner' })
      .setProtectedHeader({ alg: 'HS256' })
      .setExpirationTime('1h')
      .sign(secret);
    const noTenant = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('u')
      .setExpirationTime('1h')
      .sign(secret);
    const endpoints: Array<[string, string]> = [
      ['POST', '/v1/agents'],
      ['GET', '/v1/agents'],
      ['GET', `/v1/agents/${agent.id}`],
      ['PATCH', `/v1/agents/${agent.id}`],
      ['DELETE', `/v1/agents/${agent.id}`],
      ['POST', `/v1/agents/${agent.id}/suspend`],
      ['POST', `/v1/agents/${agent.id}/unsuspend`],
      ['POST', '/v1/credentials'],
      ['GET', '/v1/credentials'],
      ['GET', `/v1/credentials/${credential.id}`],
      ['PUT', `/v1/credentials/${credential.id}`],
      ['DELETE', `/v1/credentials/${credential.id}`],
      ['GET', '/v1/settlement/config'],
      ['PUT', '/v1/settlement/config'],
      ['DELETE', '/v1/settlement/config'],
    ];
    for (const [method, path] of endpoints) {
      for (const authorization of [undefined, 'Bearer not-a-jwt', `Bearer ${noUser}`, `Bearer ${noTenant}`]) {
        const res = await call(method, path, { headers: authorization ? { authorization } : {}, json: { name: 'x' } });
        assertEmpty(res, 401);
      }
    }
    assert.deepEqual((await ownerView()).agent.suspended, false);
  });

  it('never puts internal state in 4xx messages', async () => {
    const res = await call('POST', '/v1/agents', { token: owner, json: { name: 'owner-agent' } });
    assertError(res, 409);
    assert.ok(!/agents_live_name|constraint|duplicate key|select|insert/i.test(res.text), res.text);
    const bad = await call('PUT', `/v1/credentials/${credential.id}`, {
      token: owner,
      json: { name: 'owner-cert', plaintext: 'x'.repeat(70_000) },
    });
    assertError(bad, 400, /plaintext is too long/);
  });
});
