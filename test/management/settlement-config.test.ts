// The tenant's settlement configuration through HTTP (every status of docs/API.md "Settlement
// configuration" and of the PUT/DELETE the gateway adds), the facilitator credential format
// (PEM client certificate + private key, managed or from OpenBao), and the loader the x402
// settlement client uses, proven by a real mutual-TLS handshake.
import assert from 'node:assert/strict';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { request as httpsRequest } from 'node:https';
import { stack } from '../support/stack.ts';
import { callAt, call, uniqueName } from '../support/http.ts';
import {
  assertEmpty,
  assertError,
  clientTlsBundle,
  expiredBundle,
  mismatchedBundle,
  startBrokenGateway,
  vaultWrite,
} from '../support/catalog.ts';
import { loadSettlementClientTls } from '../../gateway/settlement/tls.ts';

const FACILITATOR = 'https://facilitator.example.com';

describe('settlement configuration', () => {
  let token: string;
  let tenant: string;
  let pemCredential: string;
  beforeEach(async () => {
    tenant = `tenant-settle-${uniqueName()}`;
    token = await stack().token(tenant);
    pemCredential = (
      await call('POST', '/v1/credentials', {
        token,
        json: { name: 'facilitator-cert', auth_type: 'none', source: 'managed', plaintext: clientTlsBundle() },
      })
    ).json.id;
  });

  const put = (json: unknown, as = token) => call('PUT', '/v1/settlement/config', { token: as, json });

  it('answers 404 before configuration; PUT creates (201), reads back (200), replaces (200), DELETE removes (204)', async () => {
    assertError(await call('GET', '/v1/settlement/config', { token }), 404, /not configured/);
    const created = await put({ facilitator_url: FACILITATOR, facilitator_credential_ref: pemCredential });
    assert.equal(created.status, 201, created.text);
    assert.deepEqual(
      { ...created.json, created_at: 0, updated_at: 0 },
      {
        tenant_id: tenant,
        facilitator_url: FACILITATOR,
        facilitator_credential_ref: pemCredential,
        claim_every_seconds: 300,
        claim_threshold: null,
        created_at: 0,
        updated_at: 0,
      },
    );
    const got = await call('GET', '/v1/settlement/config', { token });
    assert.equal(got.status, 200);
    assert.deepEqual(got.json, created.json);

    const replaced = await put({
      facilitator_url: 'https://127.0.0.1:8443',
      facilitator_credential_ref: pemCredential,
    });
    assert.equal(replaced.status, 200);
    assert.equal(replaced.json.facilitator_url, 'https://127.0.0.1:8443');
    assert.equal(replaced.json.created_at, created.json.created_at);
    assert.ok(Date.parse(replaced.json.updated_at) >= Date.parse(created.json.updated_at));

    const del = await call('DELETE', '/v1/settlement/config', { token });
    assert.equal(del.status, 204);
    assert.equal(del.text, '');
    assertError(await call('GET', '/v1/settlement/config', { token }), 404);
    assertError(await call('DELETE', '/v1/settlement/config', { token }), 404);
  });

  it('takes how its batch-settlement channels are claimed: claim_every_seconds and claim_threshold, checked, defaults when absent', async () => {
    const base = { facilitator_url: FACILITATOR, facilitator_credential_ref: pemCredential };
    const set = await put({ ...base, claim_every_seconds: 10, claim_threshold: '250000' });
    assert.equal(set.status, 201, set.text);
    assert.equal(set.json.claim_every_seconds, 10);
    assert.equal(set.json.claim_threshold, '250000');
    const got = await call('GET', '/v1/settlement/config', { token });
    assert.deepEqual([got.json.claim_every_seconds, got.json.claim_threshold], [10, '250000']);
    // Each bad value is a 400 naming its field, and changes nothing.
    const bad: Array<[Record<string, unknown>, RegExp]> = [
      [{ claim_every_seconds: 9 }, /claim_every_seconds must be at least 10/],
      [{ claim_every_seconds: 86_401 }, /claim_every_seconds must be at most 86400/],
      [{ claim_every_seconds: 12.5 }, /claim_every_seconds must be an integer/],
      [{ claim_every_seconds: '60' }, /claim_every_seconds must be an integer/],
      [{ claim_threshold: '0' }, /claim_threshold must be a positive whole amount/],
      [{ claim_threshold: '-5' }, /claim_threshold must be a positive whole amount/],
      [{ claim_threshold: '1.5' }, /claim_threshold must be a positive whole amount/],
      [{ claim_threshold: '1'.repeat(39) }, /claim_threshold must be a positive whole amount/],
      [{ claim_threshold: 1000 }, /claim_threshold must be a string/],
    ];
    for (const [fields, message] of bad) assertError(await put({ ...base, ...fields }), 400, message);
    assert.deepEqual((await call('GET', '/v1/settlement/config', { token })).json, got.json);
    // PUT replaces the whole configuration: absent, they are their defaults again.
    const replaced = await put({ ...base, claim_threshold: null });
    assert.equal(replaced.status, 200, replaced.text);
    assert.deepEqual([replaced.json.claim_every_seconds, replaced.json.claim_threshold], [300, null]);
  });

  it("names a PEM credential by its certificate's subject and fingerprint tail, nothing of the key", async () => {
    const got = await call('GET', `/v1/credentials/${pemCredential}`, { token });
    assert.equal(got.status, 200, got.text);
    const hint = String(got.json.masked_hint);
    assert.match(hint, /^certificate .+, sha256 …[0-9A-F]{8}$/);
    assert.ok(!hint.includes('PRIVATE') && !hint.includes('-----'), hint);
  });

  it('warns on the answer that prices an agent while the tenant has no settlement configured', async () => {
    const pricing = {
      amount: '1000',
      asset: 'USDC',
      network: 'base',
      pay_to: '0xa0Ee7A142d267C1f36714E4a8F75612F20a79720',
    };
    const agent = (extra: Record<string, unknown>) =>
      call('POST', '/v1/agents', { token, json: { name: uniqueName('warned'), upstream_url: FACILITATOR, ...extra } });
    const priced = await agent({ pricing });
    assert.equal(priced.status, 201, priced.text);
    assert.match(String(priced.headers['x-gateway-warning']), /not collected/);
    const free = await agent({});
    assert.equal(free.headers['x-gateway-warning'], undefined, 'an unpriced agent has nothing to warn of');
    const repriced = await call('PATCH', `/v1/agents/${free.json.id}`, { token, json: { pricing } });
    assert.equal(repriced.status, 200, repriced.text);
    assert.match(String(repriced.headers['x-gateway-warning']), /not collected/);

    assert.equal((await put({ facilitator_url: FACILITATOR, facilitator_credential_ref: pemCredential })).status, 201);
    const collected = await agent({ pricing });
    assert.equal(collected.status, 201, collected.text);
    assert.equal(collected.headers['x-gateway-warning'], undefined, 'settlement configured: collected');
  });

  it('answers 400 for bodies, URLs and credentials that cannot serve', async () => {
    const bearer = (
      await call('POST', '/v1/credentials', {
        token,
        json: { name: 'bearer', auth_type: 'bearer', source: 'managed', plaintext: 'just-a-token-value' },
      })
    ).json.id;
    const certOnly = (
      await call('POST', '/v1/credentials', {
        token,
        json: { name: 'cert-only', auth_type: 'none', source: 'managed', plaintext: stack().infra.pki.clientCertPem },
      })
    ).json.id;
    const keyOnly = (
      await call('POST', '/v1/credentials', {
        token,
        json: { name: 'key-only', auth_type: 'none', source: 'managed', plaintext: stack().infra.pki.clientKeyPem },
      })
    ).json.id;
    const mismatched = (
      await call('POST', '/v1/credentials', {
        token,
        json: { name: 'mismatched', auth_type: 'none', source: 'managed', plaintext: mismatchedBundle() },
      })
    ).json.id;
    const expired = (
      await call('POST', '/v1/credentials', {
        token,
        json: { name: 'expired', auth_type: 'none', source: 'managed', plaintext: await expiredBundle() },
      })
    ).json.id;
    const empty = (
      await call('POST', '/v1/credentials', { token, json: { name: 'empty', auth_type: 'none', source: 'managed' } })
    ).json.id;
    const unreadableVault = (
      await call('POST', '/v1/credentials', {
        token,
        json: {
          name: 'nowhere',
          auth_type: 'none',
          source: 'vault',
          vault_ref: `secret/data/tenants/${tenant}/settle/nowhere#pem`,
        },
      })
    ).json.id;
    const cases: Array<[unknown, RegExp]> = [
      [{}, /facilitator_url is required/],
      [{ facilitator_url: FACILITATOR }, /facilitator_credential_ref is required/],
      [{ facilitator_credential_ref: pemCredential }, /facilitator_url is required/],
      [{ facilitator_url: 42, facilitator_credential_ref: pemCredential }, /facilitator_url/],
      [{ facilitator_url: FACILITATOR, facilitator_credential_ref: pemCredential, extra: 1 }, /unknown field: extra/],
      [{ facilitator_url: 'http://facilitator.example.com', facilitator_credential_ref: pemCredential }, /https/],
      [{ facilitator_url: 'not a url', facilitator_credential_ref: pemCredential }, /https/],
      [{ facilitator_url: 'https://10.0.0.5:8443', facilitator_credential_ref: pemCredential }, /facilitator_url/],
      [{ facilitator_url: 'https://localhost:8443', facilitator_credential_ref: pemCredential }, /facilitator_url/],
      [{ facilitator_url: `${FACILITATOR}/?x=1`, facilitator_credential_ref: pemCredential }, /query/],
      [
        { facilitator_url: FACILITATOR, facilitator_credential_ref: 'cred_0190a0a0-0000-7000-8000-000000000000' },
        /does not name a credential/,
      ],
      [{ facilitator_url: FACILITATOR, facilitator_credential_ref: 'garbage' }, /does not name a credential/],
      [{ facilitator_url: FACILITATOR, facilitator_credential_ref: bearer }, /no PEM certificate/],
      [{ facilitator_url: FACILITATOR, facilitator_credential_ref: certOnly }, /no unencrypted PEM private key/],
      [{ facilitator_url: FACILITATOR, facilitator_credential_ref: keyOnly }, /no PEM certificate/],
      [{ facilitator_url: FACILITATOR, facilitator_credential_ref: mismatched }, /does not match/],
      [{ facilitator_url: FACILITATOR, facilitator_credential_ref: expired }, /not currently valid/],
      [{ facilitator_url: FACILITATOR, facilitator_credential_ref: empty }, /no PEM certificate/],
      [{ facilitator_url: FACILITATOR, facilitator_credential_ref: unreadableVault }, /could not be read/],
    ];
    for (const [json, message] of cases) assertError(await put(json), 400, message);
    assertError(await call('GET', '/v1/settlement/config', { token }), 404, /not configured/);
  });

  it('keeps the facilitator credential in use: DELETE is 409, a non-PEM rotation is 400, a PEM one is 200', async () => {
    assert.equal((await put({ facilitator_url: FACILITATOR, facilitator_credential_ref: pemCredential })).status, 201);
    assertError(await call('DELETE', `/v1/credentials/${pemCredential}`, { token }), 409, /referenced/);
    assertError(
      await call('PUT', `/v1/credentials/${pemCredential}`, { token, json: { plaintext: 'not a certificate' } }),
      400,
      /facilitator credential/,
    );
    const rotated = await call('PUT', `/v1/credentials/${pemCredential}`, {
      token,
      json: { plaintext: clientTlsBundle() },
    });
    assert.equal(rotated.status, 200);
    assert.equal(rotated.json.version, 2);
    assert.equal((await call('DELETE', '/v1/settlement/config', { token })).status, 204);
    assert.equal((await call('DELETE', `/v1/credentials/${pemCredential}`, { token })).status, 204);
  });

  it('accepts a facilitator credential kept in OpenBao', async () => {
    const path = `tenants/${tenant}/settle/${uniqueName('pem')}`;
    await vaultWrite(path, { pem: clientTlsBundle() });
    const vaulted = (
      await call('POST', '/v1/credentials', {
        token,
        json: { name: 'vaulted-cert', auth_type: 'none', source: 'vault', vault_ref: `secret/data/${path}#pem` },
      })
    ).json.id;
    const res = await put({ facilitator_url: FACILITATOR, facilitator_credential_ref: vaulted });
    assert.equal(res.status, 201, res.text);
    const tls = await loadSettlementClientTls(stack(), tenant);
    assert.ok(tls);
    assert.equal(tls.credentialId, vaulted);
    assert.match(tls.certPem, /BEGIN CERTIFICATE/);
  });

  it('gives the x402 client the URL, certificate and key; they complete a mutual-TLS handshake', async () => {
    assert.equal(await loadSettlementClientTls(stack(), tenant), null, 'null while unconfigured');
    const { pki } = stack().infra;
    // A stand-in facilitator that requires a client certificate from the dev CA.
    const server = createServer(
      {
        key: pki.serverKeyPem,
        cert: pki.serverCertPem,
        ca: pki.caCertPem,
        requestCert: true,
        rejectUnauthorized: true,
      },
      (req, res) => {
        const peer = (req.socket as import('node:tls').TLSSocket).getPeerCertificate();
        res.end(JSON.stringify({ subject: peer.subject?.CN }));
      },
    );
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      assert.equal((await put({ facilitator_url: url, facilitator_credential_ref: pemCredential })).status, 201);
      const tls = await loadSettlementClientTls(stack(), tenant);
      assert.ok(tls);
      assert.deepEqual([tls.facilitatorUrl, tls.credentialId], [url, pemCredential]);
      assert.equal(tls.certPem.trim(), pki.clientCertPem.trim());
      assert.equal(tls.keyPem.trim(), pki.clientKeyPem.trim());
      const answer = await new Promise<string>((resolve, reject) => {
        const req = httpsRequest(
          `${url}/supported`,
          { cert: tls.certPem, key: tls.keyPem, ca: pki.caCertPem },
          (res) => {
            let body = '';
            res.on('data', (c) => (body += c));
            res.on('end', () => resolve(body));
          },
        );
        req.on('error', reject);
        req.end();
      });
      assert.deepEqual(JSON.parse(answer), { subject: 'dev-gateway' });
    } finally {
      server.close();
    }
  });

  it('answers 401 without a token and 500 with no body when the database is gone', async () => {
    for (const method of ['GET', 'PUT', 'DELETE'])
      assertEmpty(await call(method, '/v1/settlement/config', { json: method === 'PUT' ? {} : undefined }), 401);
    const broken = await startBrokenGateway();
    try {
      assertEmpty(await callAt(broken.url, 'GET', '/v1/settlement/config', { token }), 500);
      assertEmpty(
        await callAt(broken.url, 'PUT', '/v1/settlement/config', {
          token,
          json: { facilitator_url: FACILITATOR, facilitator_credential_ref: pemCredential },
        }),
        500,
      );
      assertEmpty(await callAt(broken.url, 'DELETE', '/v1/settlement/config', { token }), 500);
    } finally {
      await broken.close();
    }
  });
});
