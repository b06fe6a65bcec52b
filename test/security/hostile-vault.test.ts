// A tenant aiming source=vault references at another tenant's secrets, against the real
// OpenBao of the stack: path tricks are refused on create and on PUT with one message
// (whether or not the target exists); a row planted by SQL resolves nowhere, for upstream
// calls on both endpoints and for the facilitator credential; the vault itself refuses
// another tenant's path to the token the gateway reads with; a tenant's own secrets still
// resolve; and every unreadable reference looks the same to the caller.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { pino } from 'pino';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { call, callAt, uniqueName, waitForInvocation, type Reply } from '../support/http.ts';
import { assertError, clientTlsBundle, tenantVaultRef, vaultWrite } from '../support/catalog.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { loadSettlementClientTls, SettlementCredentialError } from '../../gateway/settlement/tls.ts';
import { startGateway } from '../../api/wiring.ts';
import { createVaultClient, VaultReadError } from '../../gateway/credentials/vault.ts';

const sql = (text: string, params: unknown[]) => stack().orm.em.fork().getConnection().execute(text, params);

describe('hostile vault references', function () {
  this.timeout(120_000);
  // `acme` and `acme2`: one tenant id is a prefix of the other's.
  const acme = `hv-acme-${randomBytes(4).toString('hex')}`;
  const acme2 = `${acme}2`;
  const victimSecret = `VICTIM-${randomBytes(12).toString('hex')}`;
  let upstream: TestUpstream;
  let token: string;
  let rule: RegExp;

  before(async () => {
    upstream = await startUpstream();
    token = await stack().token(acme);
    await vaultWrite(`tenants/${acme2}/openai`, { token: victimSecret, pem: clientTlsBundle() });
    await vaultWrite(`tenants/${acme}/openai`, { token: `own-${randomBytes(8).toString('hex')}` });
    rule = new RegExp(`^vault_ref must look like secret/data/tenants/${acme}/<path>#<field>$`);
  });
  after(() => upstream.close());

  const createVault = (vault_ref: unknown, as = token, auth_type = 'bearer') =>
    call('POST', '/v1/credentials', {
      token: as,
      json: { name: uniqueName('hv'), auth_type, source: 'vault', vault_ref },
    });
  const newAgent = async (credentialId: string, as = token) => {
    const res = await call('POST', '/v1/agents', {
      token: as,
      json: { name: uniqueName('hv'), upstream_url: upstream.url, credential_ref: credentialId },
    });
    assert.equal(res.status, 201, res.text);
    return res.json.id as string;
  };
  /** A vault credential of the tenant whose row is then pointed at `ref` behind the API's back. */
  const planted = async (ref: string, authType = 'bearer') => {
    const created = await createVault(tenantVaultRef(acme, 'openai', 'token'), token, authType);
    assert.equal(created.status, 201, created.text);
    await sql('update credentials set vault_ref = ? where id = ?', [ref, created.json.id]);
    return created.json.id as string;
  };
  const neverSentVictim = () =>
    assert.ok(
      !JSON.stringify(upstream.received.map((r) => r.headers)).includes(victimSecret),
      'the victim secret reached the upstream',
    );

  const tricks = () => [
    `secret/data/tenants/${acme2}/openai#token`, // another tenant, whose id extends ours
    `secret/data/tenants/${acme}2/openai#token`,
    `secret/data/tenants/${acme}/../${acme2}/openai#token`,
    `secret/data/tenants/${acme}/%2e%2e/${acme2}/openai#token`,
    `secret/data/tenants/${acme}/%2E%2E%2F${acme2}/openai#token`,
    `secret/data/tenants/${acme}%2f..%2f${acme2}/openai#token`,
    `secret/data/tenants/${acme}//openai#token`,
    `secret/data/tenants/${acme}/./openai#token`,
    `secret/data/tenants/${acme}/openai/#token`,
    `/secret/data/tenants/${acme}/openai#token`,
    `secret/data/tenants/${acme}\\..\\${acme2}/openai#token`,
    `secret/data/tenants/${acme}/open%61i#token`,
    `secret/data/tenants/${acme.toUpperCase()}/openai#token`,
    `secret/data/tenants/${acme}#token`, // the prefix itself
    `secret/data/tenants/${acme}/openai#token#x`,
    `secret/data/tenants/${acme}/openai#`,
    `secret/metadata/tenants/${acme}/openai#token`,
    `kv/data/tenants/${acme}/openai#token`, // a mount outside the layout
    `cubbyhole/tenants/${acme}/openai#token`,
    `secret/data/${acme}/openai#token`,
    `sys/policies/acl/root#policy`,
    `secret/data/tenants/${acme2}/does-not-exist#token`, // refused the same whether it exists or not
  ];

  it('refuses every path trick on create, with one message, storing nothing', async () => {
    const before = await sql('select count(*)::int as n from credentials where tenant_id = ?', [acme]);
    for (const ref of tricks()) assertError(await createVault(ref), 400, rule);
    assert.deepEqual(await sql('select count(*)::int as n from credentials where tenant_id = ?', [acme]), before);
  });

  it('refuses every path trick on PUT, leaving the credential as it was', async () => {
    const own = tenantVaultRef(acme, 'openai', 'token');
    const created = (await createVault(own)).json;
    for (const ref of tricks())
      assertError(await call('PUT', `/v1/credentials/${created.id}`, { token, json: { vault_ref: ref } }), 400, rule);
    const now = await call('GET', `/v1/credentials/${created.id}`, { token });
    assert.deepEqual([now.json.vault_ref, now.json.version], [own, 1]);
  });

  it('gives a tenant whose id cannot own a vault prefix a clear 400', async () => {
    const upper = await stack().token(`HV-Upper-${randomBytes(3).toString('hex')}`);
    assertError(
      await createVault('secret/data/tenants/HV-Upper/openai#token', upper),
      400,
      /tenant id cannot own vault secrets/,
    );
  });

  it("still resolves a tenant's own vault secrets, bearer and api_key, on both endpoints", async () => {
    const path = `own/${uniqueName('hv')}`;
    const bearer = `own-bearer-${randomBytes(8).toString('hex')}`;
    const apiKey = `own-key-${randomBytes(8).toString('hex')}`;
    await vaultWrite(`tenants/${acme}/${path}`, { bearer, key: apiKey });
    for (const [authType, field, header, expected] of [
      ['bearer', 'bearer', 'authorization', `Bearer ${bearer}`],
      ['api_key', 'key', 'x-api-key', apiKey],
    ] as const) {
      const cred = await createVault(tenantVaultRef(acme, path, field), token, authType);
      assert.equal(cred.status, 201, cred.text);
      const agent = await newAgent(cred.json.id);
      const marker = `own-${randomBytes(6).toString('hex')}`;
      const invoked = await call('POST', `/v1/proxy/${agent}`, { token, body: marker });
      assert.equal(invoked.status, 202, invoked.text);
      assert.equal((await waitForInvocation(token, agent, invoked.json.invocation_id)).status, 'succeeded');
      assert.equal(upstream.received.find((r) => r.body.toString() === marker)?.headers[header], expected);
      const streamed = await call('POST', `/v1/proxy/${agent}/stream`, { token, body: `${marker}-stream` });
      assert.equal(streamed.status, 200, streamed.text);
      assert.equal(upstream.received.find((r) => r.body.toString() === `${marker}-stream`)?.headers[header], expected);
    }
  });

  it('never resolves a row planted by SQL outside its tenant, on either endpoint', async () => {
    const before = upstream.received.length;
    for (const ref of [
      `secret/data/tenants/${acme2}/openai#token`,
      `secret/data/tenants/${acme}/../${acme2}/openai#token`,
      'secret/data/other/openai#token',
    ]) {
      for (const authType of ['bearer', 'api_key']) {
        const agent = await newAgent(await planted(ref, authType));
        const invoked = await call('POST', `/v1/proxy/${agent}`, { token, body: 'planted' });
        assert.equal(invoked.status, 202, invoked.text);
        assert.equal((await waitForInvocation(token, agent, invoked.json.invocation_id)).status, 'failed');
        assertError(await call('POST', `/v1/proxy/${agent}/stream`, { token, body: 'planted' }), 502);
      }
    }
    assert.equal(upstream.received.length, before, 'nothing was forwarded');
    neverSentVictim();
  });

  it("never uses another tenant's vault secret as the facilitator credential", async () => {
    const ref = `secret/data/tenants/${acme2}/openai#pem`;
    const facilitatorUrl = 'https://facilitator.example.com';
    // Planted before the configuration: PUT /v1/settlement/config reads it as the tenant and refuses.
    assertError(
      await call('PUT', '/v1/settlement/config', {
        token,
        json: { facilitator_url: facilitatorUrl, facilitator_credential_ref: await planted(ref) },
      }),
      400,
      /could not be read/,
    );
    // Planted after a good configuration: the settlement client's read refuses it too.
    await vaultWrite(`tenants/${acme}/facilitator`, { pem: clientTlsBundle() });
    const good = (await createVault(tenantVaultRef(acme, 'facilitator', 'pem'), token, 'none')).json.id;
    const configured = await call('PUT', '/v1/settlement/config', {
      token,
      json: { facilitator_url: facilitatorUrl, facilitator_credential_ref: good },
    });
    assert.equal(configured.status, 201, configured.text);
    assert.equal((await loadSettlementClientTls(stack(), acme))?.credentialId, good);
    assertError(await call('PUT', `/v1/credentials/${good}`, { token, json: { vault_ref: ref } }), 400, rule);
    await sql('update credentials set vault_ref = ? where id = ?', [ref, good]);
    await assert.rejects(loadSettlementClientTls(stack(), acme), SettlementCredentialError);
    assert.equal((await call('DELETE', '/v1/settlement/config', { token })).status, 204);
  });

  it('gives a missing path, a missing field, a denied path and a non-string value one outcome', async () => {
    await vaultWrite(`tenants/${acme}/shapes`, { token: 'is-a-string', number: 42, object: { nested: 'x' } });
    const cases: Record<string, string> = {
      missingPath: await planted(tenantVaultRef(acme, 'no/such/path', 'token')),
      missingField: await planted(tenantVaultRef(acme, 'shapes', 'nope')),
      denied: await planted(`secret/data/tenants/${acme2}/openai#token`),
      number: await planted(tenantVaultRef(acme, 'shapes', 'number')),
      object: await planted(tenantVaultRef(acme, 'shapes', 'object')),
    };
    const outcomes: Record<string, unknown> = {};
    for (const [name, credentialId] of Object.entries(cases)) {
      const agent = await newAgent(credentialId);
      const invoked = await call('POST', `/v1/proxy/${agent}`, { token, body: name });
      assert.equal(invoked.status, 202, invoked.text);
      const id = invoked.json.invocation_id as string;
      const polled = await waitForInvocation(token, agent, id);
      const listed = (await call('GET', `/v1/invocations?agent_id=${agent}`, { token })).json;
      const streamed: Reply = await call('POST', `/v1/proxy/${agent}/stream`, { token, body: name });
      // The row completes before the workflow records its outcome (search attributes, completion):
      // compare whole histories, so wait for the workflow's end.
      await stack().temporal.workflow.getHandle(id).result();
      const history = await stack().temporal.workflow.getHandle(id).fetchHistory();
      const described = await stack().temporal.workflow.getHandle(id).describe();
      const events = (history.events ?? []).map((e) => String(e.eventType));
      const strip = (v: unknown) =>
        JSON.parse(
          JSON.stringify(v)
            .replaceAll(id, 'INV')
            .replaceAll(agent, 'AGT')
            .replace(/"\d{4}-\d\d-\d\dT[^"]+"/g, '"T"')
            .replace(/"(latency_ms|ttft_ms)":\d+/g, '"$1":0')
            .replace(/"request_id":"[^"]*"/g, '"request_id":"R"'),
        );
      outcomes[name] = {
        poll: strip(polled),
        list: strip(listed?.data ?? []),
        stream: [streamed.status, streamed.text],
        events,
        // The activity's result (or failure) as recorded, without ids.
        recorded: strip(
          (history.events ?? [])
            .map(
              (e) =>
                e.activityTaskCompletedEventAttributes?.result ??
                e.activityTaskFailedEventAttributes?.failure?.message ??
                null,
            )
            .filter((x) => x !== null)
            .map((x) => (typeof x === 'string' ? x : JSON.stringify(x))),
        ),
        status: [described.status.name, described.searchAttributes?.ErrorClass ?? null],
      };
    }
    const [first, ...rest] = Object.entries(outcomes);
    assert.equal((first[1] as { poll: { status: string } }).poll.status, 'failed');
    for (const [name, outcome] of rest) assert.deepEqual(outcome, first[1], `${name} looks different from ${first[0]}`);
    neverSentVictim();
  });

  it("gives the vault's own denial the same outcome as a missing path", async () => {
    // A gateway whose prefix check is wrong (its layout drops `tenants/`): the check passes
    // `secret/data/<tenant>/…`, and only OpenBao's per-tenant policy stands in the way.
    const config = stack().config;
    const wrong = { ...config.vault, layout: { mount: 'secret', tenantPath: '{tenant_id}' } };
    const server = await startGateway(
      { ...config, port: 0, vault: wrong },
      stack().orm,
      stack().temporal,
      pino({ level: 'silent' }),
    );
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      await vaultWrite(`${acme}/exists`, { token: victimSecret });
      const outcomes: unknown[] = [];
      // Denied by the vault (the path exists) through the wrong gateway; missing (inside the
      // tenant's prefix) through the right one: the caller must not tell them apart.
      for (const [base, vault, ref] of [
        [url, wrong, `secret/data/${acme}/exists#token`],
        [stack().apiUrl, config.vault, `secret/data/tenants/${acme}/no-such-path#token`],
      ] as const) {
        const direct = await createVaultClient(vault)
          .read(acme, ref)
          .then(
            () => 'read',
            (err: unknown) => (err instanceof VaultReadError ? [err.reason, err.message] : String(err)),
          );
        const agent = await newAgent(await planted(ref));
        const streamed = await callAt(base, 'POST', `/v1/proxy/${agent}/stream`, { token, body: 'denied?' });
        outcomes.push({ direct, stream: [streamed.status, streamed.text] });
      }
      assert.deepEqual(outcomes[0], outcomes[1]);
      assert.deepEqual((outcomes[0] as { direct: unknown }).direct, [
        'unreadable',
        'vault secret could not be read (unreadable)',
      ]);
      neverSentVictim();
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });

  it("the vault itself refuses another tenant's path to the tokens the gateway reads with", async () => {
    const { addr, token: gatewayToken, tenantRole } = stack().infra.vault;
    assert.ok(tenantRole, 'the stack configures a tenant token role');
    const read = async (as: string, path: string) => {
      const res = await request(`${addr}/v1/secret/data/${path}`, { headers: { 'x-vault-token': as } });
      await res.body.dump();
      return res.statusCode;
    };
    const mint = async (body: unknown, path = `auth/token/create/${tenantRole}`) => {
      const res = await request(`${addr}/v1/${path}`, {
        method: 'POST',
        headers: { 'x-vault-token': gatewayToken, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      const json = (await res.body.json().catch(() => ({}))) as { auth?: { client_token?: string } };
      return { status: res.statusCode, token: json.auth?.client_token };
    };
    // The gateway's own token reads nothing and can only mint through the role, with its policy.
    assert.equal(await read(gatewayToken, `tenants/${acme}/openai`), 403);
    assert.equal((await mint({ policies: ['root'] }, 'auth/token/create')).status, 403);
    assert.equal((await mint({ entity_alias: acme, policies: ['root'] })).status, 400);
    // A child token bound to `acme` reads acme's prefix and nothing else, `acme2` included.
    const child = await mint({ entity_alias: acme, ttl: '60s' });
    assert.equal(child.status, 200);
    assert.equal(await read(child.token!, `tenants/${acme}/openai`), 200);
    assert.equal(await read(child.token!, `tenants/${acme2}/openai`), 403);
    assert.notEqual(await read(child.token!, `tenants/${acme}/../${acme2}/openai`), 200);
  });
});
