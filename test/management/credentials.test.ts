// The credential vault through HTTP: create/list/get/PUT/DELETE with every status of docs/API.md
// "Credentials", envelope encryption at rest, injection into upstream calls (managed and
// OpenBao-backed), KEK rotation with `npm run rotate-kek`, and a canary secret that must
// never appear in a response, a log line, a Temporal history or a search attribute.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { Runtime } from '@temporalio/worker';
import { stack } from '../support/stack.ts';
import { callAt, call, uniqueName, waitForInvocation, type Reply } from '../support/http.ts';
import {
  assertEmpty,
  assertError,
  startBrokenGateway,
  startCapturedGateway,
  tenantVaultRef,
  vaultWrite,
} from '../support/catalog.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { workflowResult } from '../support/workflows.ts';

type Row = {
  id: string;
  kek_id: string | null;
  wrapped_key: Buffer | null;
  secret_ciphertext: Buffer | null;
  version: number;
  masked_hint: string | null;
  vault_ref: string | null;
};

async function rowOf(id: string): Promise<Row> {
  const rows = await stack()
    .orm.em.fork()
    .getConnection()
    .execute<Row[]>(
      'select id, kek_id, wrapped_key, secret_ciphertext, version, masked_hint, vault_ref from credentials where id = ?',
      [id],
    );
  return rows[0];
}

describe('credentials: the vault', () => {
  let upstream: TestUpstream;
  let token: string;
  before(async () => {
    upstream = await startUpstream();
    token = await stack().token('tenant-creds');
  });
  after(() => upstream.close());

  const create = (json: unknown, as = token) => call('POST', '/v1/credentials', { token: as, json });

  /** Invokes a fresh agent using the credential and returns the headers the upstream saw. */
  async function upstreamHeadersWith(credentialId: string, as = token): Promise<Record<string, unknown>> {
    const agent = await call('POST', '/v1/agents', {
      token: as,
      json: { name: uniqueName(), upstream_url: upstream.url, credential_ref: credentialId },
    });
    assert.equal(agent.status, 201, agent.text);
    return invokeAndSee(agent.json.id, as);
  }

  async function invokeAndSee(agentId: string, as = token): Promise<Record<string, unknown>> {
    const marker = `call-${randomBytes(6).toString('hex')}`;
    const invoked = await call('POST', `/v1/proxy/${agentId}`, {
      token: as,
      body: marker,
      headers: { authorization: `Bearer ${as}`, 'x-api-key': 'caller-supplied' },
    });
    assert.equal(invoked.status, 202, invoked.text);
    const done = await waitForInvocation(as, agentId, invoked.json.invocation_id);
    assert.equal(done.status, 'succeeded', JSON.stringify(done));
    const seen = upstream.received.find((r) => r.body.toString() === marker);
    assert.ok(seen, 'the upstream was called');
    return seen.headers;
  }

  describe('POST /v1/credentials', () => {
    it('stores a managed secret envelope-encrypted and answers with metadata only', async () => {
      const secret = `sk-live-${randomBytes(16).toString('hex')}`;
      const name = uniqueName('cred');
      const res = await create({ name, auth_type: 'bearer', source: 'managed', plaintext: secret });
      assert.equal(res.status, 201, res.text);
      const c = res.json;
      assert.match(c.id, /^cred_[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-/);
      assert.deepEqual(
        { ...c, id: 0, created_at: 0, updated_at: 0 },
        {
          id: 0,
          tenant_id: 'tenant-creds',
          name,
          auth_type: 'bearer',
          source: 'managed',
          masked_hint: `****${secret.slice(-4)}`,
          version: 1,
          created_at: 0,
          updated_at: 0,
        },
      );
      assert.ok(!res.text.includes(secret));
      const row = await rowOf(c.id);
      assert.equal(row.kek_id, 'dev');
      assert.equal(row.wrapped_key!.length, 1 + 12 + 16 + 32);
      assert.ok(!Buffer.from(row.secret_ciphertext!).includes(Buffer.from(secret)), 'ciphertext is not the plaintext');
    });

    it('shows at most the last four characters, fewer for short secrets', async () => {
      const hint = async (plaintext: string) =>
        (await create({ name: uniqueName('cred'), auth_type: 'api_key', source: 'managed', plaintext })).json
          .masked_hint;
      assert.equal(await hint('abcdefghijklmnopqrst'), '****qrst');
      assert.equal(await hint('abcdefghij'), '****ij');
      assert.equal(await hint('abcdefg'), '****');
      assert.equal(await hint('x'), '****');
    });

    it('stores only the reference of a vault secret; api_key defaults its header to X-API-Key', async () => {
      const res = await create({
        name: uniqueName('cred'),
        auth_type: 'api_key',
        source: 'vault',
        vault_ref: 'secret/data/tenants/tenant-creds/agents/foo#token',
      });
      assert.equal(res.status, 201, res.text);
      assert.equal(res.json.vault_ref, 'secret/data/tenants/tenant-creds/agents/foo#token');
      assert.equal(res.json.header_name, 'X-API-Key');
      assert.ok(!('masked_hint' in res.json));
      const row = await rowOf(res.json.id);
      assert.deepEqual([row.kek_id, row.wrapped_key, row.secret_ciphertext], [null, null, null]);
      const none = await create({ name: uniqueName('cred'), auth_type: 'none', source: 'managed' });
      assert.equal(none.status, 201, none.text);
      assert.equal(none.json.masked_hint, null);
    });

    it('answers 400 for invalid bodies, naming the field', async () => {
      const cases: Array<[unknown, RegExp]> = [
        [{}, /name is required/],
        [{ name: '', auth_type: 'bearer', source: 'managed', plaintext: 'x' }, /name/],
        [{ name: 'n', source: 'managed', plaintext: 'x' }, /auth_type is required/],
        [{ name: 'n', auth_type: 'basic', source: 'managed', plaintext: 'x' }, /auth_type/],
        [{ name: 'n', auth_type: 'bearer', plaintext: 'x' }, /source is required/],
        [{ name: 'n', auth_type: 'bearer', source: 'kms', plaintext: 'x' }, /source/],
        [{ name: 'n', auth_type: 'bearer', source: 'managed' }, /plaintext is required/],
        [{ name: 'n', auth_type: 'bearer', source: 'managed', plaintext: '' }, /plaintext must not be empty/],
        [{ name: 'n', auth_type: 'bearer', source: 'managed', plaintext: 42 }, /plaintext/],
        [{ name: 'n', auth_type: 'bearer', source: 'managed', plaintext: 'two\nlines' }, /plaintext must be printable/],
        [
          {
            name: 'n',
            auth_type: 'bearer',
            source: 'managed',
            plaintext: 'x',
            vault_ref: 'secret/data/tenants/tenant-creds/a#b',
          },
          /vault_ref is only valid for source vault/,
        ],
        [{ name: 'n', auth_type: 'bearer', source: 'vault' }, /vault_ref is required/],
        [
          {
            name: 'n',
            auth_type: 'bearer',
            source: 'vault',
            vault_ref: 'secret/data/tenants/tenant-creds/a#b',
            plaintext: 'x',
          },
          /plaintext is only valid for source managed/,
        ],
        [{ name: 'n', auth_type: 'bearer', source: 'vault', vault_ref: 'secret/foo' }, /vault_ref must look like/],
        [
          { name: 'n', auth_type: 'bearer', source: 'vault', vault_ref: 'secret/data/tenants/tenant-creds/../sys#x' },
          /vault_ref must look like secret\/data\/tenants\/tenant-creds\/<path>#<field>/,
        ],
        [
          { name: 'n', auth_type: 'bearer', source: 'managed', plaintext: 'x', header_name: 'X-Key' },
          /header_name is only valid for auth_type api_key/,
        ],
        [{ name: 'n', auth_type: 'api_key', source: 'managed', plaintext: 'x', header_name: 'Host' }, /header_name/],
        [
          { name: 'n', auth_type: 'api_key', source: 'managed', plaintext: 'x', header_name: 'bad header' },
          /header_name/,
        ],
        [{ name: 'n', auth_type: 'bearer', source: 'managed', plaintext: 'x', secret: 'y' }, /unknown field: secret/],
      ];
      for (const [json, message] of cases) assertError(await create(json), 400, message);
      assertError(
        await call('POST', '/v1/credentials', { token, body: 'nope', headers: { 'content-type': 'application/json' } }),
        400,
      );
    });

    it('answers 409 for a name already used in the tenant (not across tenants)', async () => {
      const name = uniqueName('cred');
      assert.equal((await create({ name, auth_type: 'none', source: 'managed' })).status, 201);
      assertError(await create({ name, auth_type: 'bearer', source: 'managed', plaintext: 'abc' }), 409, /name/);
      assert.equal(
        (await create({ name, auth_type: 'none', source: 'managed' }, await stack().token('tenant-creds-other')))
          .status,
        201,
      );
    });
  });

  describe('GET /v1/credentials and /v1/credentials/{id}', () => {
    it('lists with cursor pagination and reads one; 404 for unknown ids', async () => {
      const t = await stack().token(`tenant-credlist-${uniqueName()}`);
      const ids: string[] = [];
      for (let i = 0; i < 3; i++)
        ids.push(
          (
            await create(
              { name: `c${i}`, auth_type: 'bearer', source: 'managed', plaintext: `secret-number-${i}-abcdefgh` },
              t,
            )
          ).json.id,
        );
      const first = await call('GET', '/v1/credentials?limit=2', { token: t });
      assert.equal(first.status, 200);
      assert.deepEqual(
        first.json.data.map((c: any) => c.id),
        ids.slice(0, 2),
      );
      const second = await call('GET', `/v1/credentials?limit=2&cursor=${first.json.next_cursor}`, { token: t });
      assert.deepEqual(
        second.json.data.map((c: any) => c.id),
        ids.slice(2),
      );
      assert.equal(second.json.next_cursor, null);
      const one = await call('GET', `/v1/credentials/${ids[1]}`, { token: t });
      assert.equal(one.status, 200);
      assert.deepEqual(one.json, first.json.data[1]);
      assertError(await call('GET', '/v1/credentials/cred_0190a0a0-0000-7000-8000-000000000000', { token: t }), 404);
      assertError(await call('GET', '/v1/credentials/agt_0190a0a0-0000-7000-8000-000000000000', { token: t }), 404);
      assertError(await call('GET', '/v1/credentials?cursor=xyz', { token: t }), 400, /cursor/);
      assertError(await call('GET', '/v1/credentials?limit=many', { token: t }), 400, /limit/);
    });
  });

  describe('PUT /v1/credentials/{id}', () => {
    it('renames, changes auth_type and rotates: a new plaintext is a new version under a fresh data key', async () => {
      const c = (
        await create({
          name: uniqueName('cred'),
          auth_type: 'bearer',
          source: 'managed',
          plaintext: 'first-secret-value-0001',
        })
      ).json;
      const before = await rowOf(c.id);
      const name = uniqueName('cred');
      const renamed = await call('PUT', `/v1/credentials/${c.id}`, { token, json: { name } });
      assert.equal(renamed.status, 200);
      assert.deepEqual([renamed.json.name, renamed.json.version], [name, 1]);
      const rotated = await call('PUT', `/v1/credentials/${c.id}`, {
        token,
        json: { plaintext: 'second-secret-value-0002' },
      });
      assert.deepEqual([rotated.json.version, rotated.json.masked_hint, rotated.json.name], [2, '****0002', name]);
      const after = await rowOf(c.id);
      assert.notDeepEqual(after.wrapped_key, before.wrapped_key);
      assert.notDeepEqual(after.secret_ciphertext, before.secret_ciphertext);
      const asKey = await call('PUT', `/v1/credentials/${c.id}`, {
        token,
        json: { auth_type: 'api_key', header_name: 'X-Upstream-Key' },
      });
      assert.deepEqual(
        [asKey.json.auth_type, asKey.json.header_name, asKey.json.version],
        ['api_key', 'X-Upstream-Key', 2],
      );
      // Leaving api_key drops the header name.
      const back = await call('PUT', `/v1/credentials/${c.id}`, { token, json: { auth_type: 'bearer' } });
      assert.deepEqual([back.json.auth_type, 'header_name' in back.json], ['bearer', false]);
      const empty = await call('PUT', `/v1/credentials/${c.id}`, { token, json: {} });
      assert.equal(empty.status, 200);
      assert.equal(empty.json.updated_at, back.json.updated_at);
    });

    it('rotates a vault reference (version increments)', async () => {
      const c = (
        await create({
          name: uniqueName('cred'),
          auth_type: 'bearer',
          source: 'vault',
          vault_ref: 'secret/data/tenants/tenant-creds/a#token',
        })
      ).json;
      const res = await call('PUT', `/v1/credentials/${c.id}`, {
        token,
        json: { vault_ref: 'secret/data/tenants/tenant-creds/b#token' },
      });
      assert.deepEqual(
        [res.status, res.json.vault_ref, res.json.version],
        [200, 'secret/data/tenants/tenant-creds/b#token', 2],
      );
      assertError(
        await call('PUT', `/v1/credentials/${c.id}`, { token, json: { plaintext: 'x' } }),
        400,
        /plaintext is only valid for source managed/,
      );
    });

    it('answers 400 for an invalid body, empty name or plaintext, invalid auth_type', async () => {
      const c = (await create({ name: uniqueName('cred'), auth_type: 'none', source: 'managed' })).json;
      const put = (json: unknown) => call('PUT', `/v1/credentials/${c.id}`, { token, json });
      assertError(await put({ name: '' }), 400, /name/);
      assertError(await put({ plaintext: '' }), 400, /plaintext/);
      assertError(await put({ auth_type: 'oauth' }), 400, /auth_type/);
      assertError(await put({ auth_type: 'bearer' }), 400, /plaintext is required/);
      assertError(
        await put({ vault_ref: 'secret/data/tenants/tenant-creds/a#b' }),
        400,
        /vault_ref is only valid for source vault/,
      );
      assertError(await put({ source: 'vault' }), 400, /unknown field: source/);
      assertError(await put({ header_name: 'X-Key' }), 400, /header_name/);
      assertError(
        await call('PUT', `/v1/credentials/${c.id}`, {
          token,
          body: '[',
          headers: { 'content-type': 'application/json' },
        }),
        400,
      );
      // A PEM bundle stored for auth_type none cannot silently become a bearer token.
      const pem = (
        await create({
          name: uniqueName('cred'),
          auth_type: 'none',
          source: 'managed',
          plaintext: '-----BEGIN X-----\nabc\n-----END X-----\n',
        })
      ).json;
      assertError(
        await call('PUT', `/v1/credentials/${pem.id}`, { token, json: { auth_type: 'bearer' } }),
        400,
        /stored secret/,
      );
      assert.equal((await call('GET', `/v1/credentials/${c.id}`, { token })).json.updated_at, c.updated_at);
    });

    it('answers 409 when the new name is taken, 404 for unknown ids', async () => {
      const a = (await create({ name: uniqueName('cred'), auth_type: 'none', source: 'managed' })).json;
      const b = (await create({ name: uniqueName('cred'), auth_type: 'none', source: 'managed' })).json;
      assertError(await call('PUT', `/v1/credentials/${b.id}`, { token, json: { name: a.name } }), 409, /name/);
      assertError(
        await call('PUT', '/v1/credentials/cred_0190a0a0-0000-7000-8000-000000000000', { token, json: { name: 'x' } }),
        404,
      );
    });
  });

  describe('DELETE /v1/credentials/{id}', () => {
    it('answers 409 while a live agent references it, 204 once none does, then 404', async () => {
      const c = (
        await create({
          name: uniqueName('cred'),
          auth_type: 'bearer',
          source: 'managed',
          plaintext: 'referenced-secret-123',
        })
      ).json;
      const agent = (await call('POST', '/v1/agents', { token, json: { name: uniqueName(), credential_ref: c.id } }))
        .json;
      assertError(await call('DELETE', `/v1/credentials/${c.id}`, { token }), 409, /referenced/);
      // Pointing the agent elsewhere (or deleting it) releases the credential.
      assert.equal(
        (await call('PATCH', `/v1/agents/${agent.id}`, { token, json: { credential_ref: null } })).status,
        200,
      );
      await call('PATCH', `/v1/agents/${agent.id}`, { token, json: { credential_ref: c.id } });
      await call('DELETE', `/v1/agents/${agent.id}`, { token });
      const del = await call('DELETE', `/v1/credentials/${c.id}`, { token });
      assert.equal(del.status, 204);
      assert.equal(del.text, '');
      assertError(await call('GET', `/v1/credentials/${c.id}`, { token }), 404);
      assertError(await call('DELETE', `/v1/credentials/${c.id}`, { token }), 404);
    });

    it('never lets a concurrent delete and a new reference both win', async () => {
      for (let i = 0; i < 5; i++) {
        const c = (await create({ name: uniqueName('cred'), auth_type: 'none', source: 'managed' })).json;
        const [agent, del] = await Promise.all([
          call('POST', '/v1/agents', { token, json: { name: uniqueName(), credential_ref: c.id } }),
          call('DELETE', `/v1/credentials/${c.id}`, { token }),
        ]);
        // Either the agent got the credential (and the delete was refused) or the delete won (and the agent was refused).
        assert.ok(
          (agent.status === 201 && del.status === 409) || (agent.status === 400 && del.status === 204),
          `${agent.status}/${del.status}`,
        );
      }
    });
  });

  describe('injection into upstream calls', () => {
    it("sends bearer as Authorization, api_key in its header, none as nothing; never the caller's token", async () => {
      const bearer = (
        await create({
          name: uniqueName('cred'),
          auth_type: 'bearer',
          source: 'managed',
          plaintext: 'bearer-secret-abc123',
        })
      ).json;
      let seen = await upstreamHeadersWith(bearer.id);
      assert.equal(seen.authorization, 'Bearer bearer-secret-abc123');

      const key = (
        await create({
          name: uniqueName('cred'),
          auth_type: 'api_key',
          source: 'managed',
          plaintext: 'key-secret-xyz789',
        })
      ).json;
      seen = await upstreamHeadersWith(key.id);
      assert.equal(seen['x-api-key'], 'key-secret-xyz789');
      assert.equal(seen.authorization, undefined);

      const custom = (
        await create({
          name: uniqueName('cred'),
          auth_type: 'api_key',
          source: 'managed',
          plaintext: 'custom-secret-000',
          header_name: 'X-Upstream-Token',
        })
      ).json;
      seen = await upstreamHeadersWith(custom.id);
      assert.equal(seen['x-upstream-token'], 'custom-secret-000');

      const none = (await create({ name: uniqueName('cred'), auth_type: 'none', source: 'managed' })).json;
      seen = await upstreamHeadersWith(none.id);
      assert.equal(seen.authorization, undefined);
    });

    it('uses the rotated secret on the very next call', async () => {
      const c = (
        await create({
          name: uniqueName('cred'),
          auth_type: 'bearer',
          source: 'managed',
          plaintext: 'before-rotation-1',
        })
      ).json;
      const agent = (
        await call('POST', '/v1/agents', {
          token,
          json: { name: uniqueName(), upstream_url: upstream.url, credential_ref: c.id },
        })
      ).json;
      assert.equal((await invokeAndSee(agent.id)).authorization, 'Bearer before-rotation-1');
      await call('PUT', `/v1/credentials/${c.id}`, { token, json: { plaintext: 'after-rotation-2' } });
      assert.equal((await invokeAndSee(agent.id)).authorization, 'Bearer after-rotation-2');
    });

    it('resolves an OpenBao KV v2 secret at call time, never storing it', async () => {
      const path = `tenants/tenant-creds/agents/${uniqueName('bao')}`;
      await vaultWrite(path, { token: 'bao-secret-one', other: 'x' });
      const c = (
        await create({
          name: uniqueName('cred'),
          auth_type: 'bearer',
          source: 'vault',
          vault_ref: `secret/data/${path}#token`,
        })
      ).json;
      const agent = (
        await call('POST', '/v1/agents', {
          token,
          json: { name: uniqueName(), upstream_url: upstream.url, credential_ref: c.id },
        })
      ).json;
      assert.equal((await invokeAndSee(agent.id)).authorization, 'Bearer bao-secret-one');
      // A new version in the vault is picked up by the next call: nothing was cached or copied.
      await vaultWrite(path, { token: 'bao-secret-two' });
      assert.equal((await invokeAndSee(agent.id)).authorization, 'Bearer bao-secret-two');
      const row = await rowOf(c.id);
      assert.deepEqual(
        [row.secret_ciphertext, row.masked_hint, row.vault_ref],
        [null, null, `secret/data/${path}#token`],
      );
    });

    it('fails the invocation, coarsely, when the vault has no such field', async () => {
      const c = (
        await create({
          name: uniqueName('cred'),
          auth_type: 'bearer',
          source: 'vault',
          vault_ref: 'secret/data/tenants/tenant-creds/agents/does-not-exist#token',
        })
      ).json;
      const agent = (
        await call('POST', '/v1/agents', {
          token,
          json: { name: uniqueName(), upstream_url: upstream.url, credential_ref: c.id },
        })
      ).json;
      const before = upstream.received.length;
      const invoked = await call('POST', `/v1/proxy/${agent.id}`, { token, body: 'never-sent' });
      assert.equal(invoked.status, 202);
      const done = await waitForInvocation(token, agent.id, invoked.json.invocation_id);
      assert.equal(done.status, 'failed');
      assert.equal(upstream.received.length, before, 'nothing was forwarded');
    });
  });

  describe('KEK rotation (npm run rotate-kek)', () => {
    const keyringEnv = () =>
      [...stack().config.vault.keyring.keys.entries()].map(([id, key]) => `${id}:${key.toString('base64')}`).join(',');
    const rotate = (env: Record<string, string>) =>
      spawnSync('npm', ['run', '--silent', 'rotate-kek'], {
        env: { ...process.env, DATABASE_URL: stack().config.databaseUrl, ...env },
        encoding: 'utf8',
        timeout: 60_000,
      });

    it('re-wraps every data key under the current KEK without touching ciphertext or version; the proxy still reads every credential', async () => {
      const t = await stack().token(`tenant-kek-${uniqueName()}`);
      const creds: any[] = [];
      for (let i = 0; i < 3; i++)
        creds.push(
          (
            await create(
              {
                name: `k${i}`,
                auth_type: 'bearer',
                source: 'managed',
                plaintext: `kek-secret-${i}-${randomBytes(8).toString('hex')}`,
              },
              t,
            )
          ).json,
        );
      const secrets = await Promise.all(
        creds.map(
          async (c, i) =>
            (await call('PUT', `/v1/credentials/${c.id}`, { token: t, json: { plaintext: `kek-rotated-${i}-value` } }))
              .json,
        ),
      );
      const before = await Promise.all(secrets.map((c) => rowOf(c.id)));
      assert.ok(before.every((r) => r.kek_id === 'dev' && r.version === 2));

      // A keyring without the old key cannot re-wrap: nothing changes and the command fails.
      const stranded = rotate({
        VAULT_KEKS: `next:${stack().config.vault.keyring.keys.get('next')!.toString('base64')}`,
        VAULT_KEK_CURRENT: 'next',
      });
      assert.equal(stranded.status, 1, stranded.stdout + stranded.stderr);
      assert.deepEqual((await rowOf(secrets[0].id)).wrapped_key, before[0].wrapped_key);

      const run = rotate({ VAULT_KEKS: keyringEnv(), VAULT_KEK_CURRENT: 'next' });
      assert.equal(run.status, 0, run.stdout + run.stderr);
      assert.match(run.stdout, /re-wrapped [1-9]\d*/);
      const after = await Promise.all(secrets.map((c) => rowOf(c.id)));
      for (let i = 0; i < after.length; i++) {
        assert.equal(after[i].kek_id, 'next');
        assert.equal(after[i].version, 2);
        assert.notDeepEqual(after[i].wrapped_key, before[i].wrapped_key);
        assert.deepEqual(after[i].secret_ciphertext, before[i].secret_ciphertext);
        assert.equal(after[i].masked_hint, before[i].masked_hint);
      }
      for (const [i, c] of secrets.entries()) {
        assert.equal((await upstreamHeadersWith(c.id, t)).authorization, `Bearer kek-rotated-${i}-value`);
        assert.equal((await call('GET', `/v1/credentials/${c.id}`, { token: t })).json.version, 2);
      }
      // Running it again finds nothing left to do for these.
      const again = rotate({ VAULT_KEKS: keyringEnv(), VAULT_KEK_CURRENT: 'next' });
      assert.equal(again.status, 0);
      assert.match(again.stdout, /re-wrapped 0,/);
      // Credentials written afterwards (under the API's current key) and the rotated ones coexist.
      const fresh = (
        await create(
          { name: 'k-after', auth_type: 'bearer', source: 'managed', plaintext: 'written-after-rotation' },
          t,
        )
      ).json;
      assert.equal((await rowOf(fresh.id)).kek_id, 'dev');
      assert.equal((await upstreamHeadersWith(fresh.id, t)).authorization, 'Bearer written-after-rotation');
    });
  });

  describe('the secret never leaves', () => {
    it('keeps a canary secret out of every response, log line, error, Temporal history and search attribute', async function () {
      this.timeout(120_000);
      const canary = `CANARY-${randomBytes(12).toString('hex')}`;
      const vaultCanary = `VAULTCANARY-${randomBytes(12).toString('hex')}`;
      const tenant = `tenant-canary-${uniqueName()}`;
      const t = await stack().token(tenant);
      const gateway = await startCapturedGateway();
      const broken = await startBrokenGateway();
      // Capture what the Temporal worker logs (activity failures included) while this runs.
      const sdkLogger = Runtime.instance().logger as unknown as Record<string, (...args: unknown[]) => void>;
      const sdkLines: string[] = [];
      const original: Record<string, (...args: unknown[]) => void> = {};
      for (const level of ['log', 'trace', 'debug', 'info', 'warn', 'error']) {
        original[level] = sdkLogger[level];
        sdkLogger[level] = (...args: unknown[]) => {
          sdkLines.push(
            JSON.stringify(args, (_k, v) => (v instanceof Error ? { message: v.message, stack: v.stack } : v)),
          );
          original[level].apply(sdkLogger, args);
        };
      }
      const replies: Reply[] = [];
      const api = async (method: string, path: string, json?: unknown, base = gateway.url) => {
        const r = await callAt(base, method, path, { token: t, ...(json === undefined ? {} : { json }) });
        replies.push(r);
        return r;
      };
      const workflowIds: string[] = [];
      try {
        await vaultWrite(`tenants/${tenant}/canary`, { token: vaultCanary });
        const managed = (
          await api('POST', '/v1/credentials', {
            name: 'canary',
            auth_type: 'bearer',
            source: 'managed',
            plaintext: canary,
          })
        ).json;
        const vaulted = (
          await api('POST', '/v1/credentials', {
            name: 'canary-vault',
            auth_type: 'api_key',
            source: 'vault',
            vault_ref: tenantVaultRef(tenant, 'canary', 'token'),
          })
        ).json;
        const missing = (
          await api('POST', '/v1/credentials', {
            name: 'canary-missing',
            auth_type: 'bearer',
            source: 'vault',
            vault_ref: tenantVaultRef(tenant, 'canary/nowhere', 'token'),
          })
        ).json;
        await api('GET', `/v1/credentials/${managed.id}`);
        await api('GET', '/v1/credentials');
        await api('PUT', `/v1/credentials/${managed.id}`, { name: 'canary-renamed' });
        await api('PUT', `/v1/credentials/${managed.id}`, { plaintext: canary });
        // Refused requests that carry the canary: the error must not echo it.
        await api('POST', '/v1/credentials', {
          name: 'canary-bad',
          auth_type: 'bearer',
          source: 'vault',
          vault_ref: tenantVaultRef(tenant, 'x', 'y'),
          plaintext: canary,
        });
        await api('POST', '/v1/credentials', {
          name: 'canary-managed',
          auth_type: 'bearer',
          source: 'managed',
          plaintext: canary,
        });
        await api('POST', '/v1/credentials', {
          name: 'canary-managed',
          auth_type: 'bearer',
          source: 'managed',
          plaintext: canary,
        }); // 409
        await api('POST', '/v1/credentials', {
          name: 'canary-x',
          auth_type: 'bearer',
          source: 'managed',
          plaintext: `${canary}\n`,
        });
        await api('PUT', `/v1/credentials/${managed.id}`, { plaintext: canary, surprise: canary });
        await api('PUT', '/v1/settlement/config', {
          facilitator_url: 'https://facilitator.example.com',
          facilitator_credential_ref: managed.id,
        });
        // A 500 with the canary in the request body, logged by a gateway whose database is gone.
        await api(
          'POST',
          '/v1/credentials',
          { name: 'canary-500', auth_type: 'bearer', source: 'managed', plaintext: canary },
          broken.url,
        );

        for (const credential of [managed, vaulted, missing]) {
          const agent = (
            await api('POST', '/v1/agents', {
              name: uniqueName(),
              upstream_url: upstream.url,
              credential_ref: credential.id,
            })
          ).json;
          const invoked = await api('POST', `/v1/proxy/${agent.id}`, undefined);
          workflowIds.push(invoked.json.invocation_id);
          await workflowResult(invoked.json.invocation_id).catch(() => undefined);
          await api('GET', `/v1/proxy/${agent.id}/invocations/${invoked.json.invocation_id}`);
          await api('GET', `/v1/agents/${agent.id}`);
        }
        // Positive control: the secrets did reach the upstream, so their absence elsewhere means something.
        assert.ok(upstream.received.some((r) => r.headers.authorization === `Bearer ${canary}`));
        assert.ok(upstream.received.some((r) => r.headers['x-api-key'] === vaultCanary));
      } finally {
        for (const level of Object.keys(original)) sdkLogger[level] = original[level];
        await gateway.close();
        await broken.close();
      }

      const leaks = (where: string, text: string) => {
        assert.ok(!text.includes(canary), `managed canary leaked into ${where}`);
        assert.ok(!text.includes(vaultCanary), `vault canary leaked into ${where}`);
      };
      assert.ok(
        replies.length > 20 &&
          replies.some((r) => r.status === 500) &&
          replies.some((r) => r.status === 409) &&
          replies.some((r) => r.status === 400),
      );
      for (const r of replies) leaks(`a ${r.status} response`, `${JSON.stringify(r.headers)}\n${r.text}`);
      assert.ok(gateway.lines.length > 0 && broken.lines.length > 0, 'the gateways logged');
      leaks('the API log', gateway.lines.join(''));
      leaks('the API error log', broken.lines.join(''));
      leaks('the worker log', sdkLines.join('\n'));
      // Every workflow of the tenant: histories (inputs, results, failures), search attributes, memo.
      const query = `TenantId = '${tenant}'`;
      const seen = new Set<string>(workflowIds);
      for await (const wf of stack().temporal.workflow.list({ query })) seen.add(wf.workflowId);
      assert.ok(seen.size >= 3);
      for (const id of seen) {
        const handle = stack().temporal.workflow.getHandle(id);
        leaks(`the history of ${id}`, JSON.stringify(await handle.fetchHistory()));
        const described = await handle.describe();
        leaks(
          `the search attributes of ${id}`,
          JSON.stringify({
            sa: described.searchAttributes,
            typed: described.typedSearchAttributes.getAll(),
            memo: described.memo ?? null,
          }),
        );
      }
      // At rest: only the envelope.
      const rows = await stack()
        .orm.em.fork()
        .getConnection()
        .execute<any[]>('select * from credentials where tenant_id = ?', [tenant]);
      leaks(
        'the credentials table',
        JSON.stringify(rows) + rows.map((r) => Buffer.from(r.secret_ciphertext ?? '').toString('latin1')).join(''),
      );
    });
  });

  it('answers 500 with no body when the database is gone', async () => {
    const broken = await startBrokenGateway();
    try {
      assertEmpty(
        await callAt(broken.url, 'GET', '/v1/credentials/cred_0190a0a0-0000-7000-8000-000000000000', { token }),
        500,
      );
      assertEmpty(
        await callAt(broken.url, 'PUT', '/v1/credentials/cred_0190a0a0-0000-7000-8000-000000000000', {
          token,
          json: { name: 'x' },
        }),
        500,
      );
      assertEmpty(
        await callAt(broken.url, 'DELETE', '/v1/credentials/cred_0190a0a0-0000-7000-8000-000000000000', { token }),
        500,
      );
    } finally {
      await broken.close();
    }
  });
});
