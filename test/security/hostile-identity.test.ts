// Bearer tokens as a hostile caller would forge or replay them: a token that never expires, one
// for another issuer or audience, one minted long ago, and a gateway configured with a secret
// short enough to guess. HS256 and JWKS (a real JWKS served over HTTP) follow the same rules, and
// `npm run token` mints what the configuration accepts.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT, type JWTPayload } from 'jose';
import { stack } from '../support/stack.ts';
import { callAt } from '../support/http.ts';
import { waitFor } from '../support/wait.ts';
import { startGateway } from '../../api/wiring.ts';
import { createLogger } from '../../lib/log.ts';
import { loadGatewayConfig, type GatewayConfig } from '../../gateway/config.ts';

type Auth = Partial<GatewayConfig['auth']>;

async function gatewayWith(auth: Auth): Promise<{ url: string; close(): Promise<void> }> {
  const base = stack().config;
  const server = await startGateway(
    { ...base, port: 0, auth: { ...base.auth, ...auth } },
    stack().orm,
    stack().temporal,
    createLogger('api', 'silent'),
  );
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

const hsKey = () => new TextEncoder().encode(stack().config.auth.jwtSecret!);

function hs256(payload: JWTPayload, opts: { exp?: number | null; iat?: number | null } = {}): Promise<string> {
  let jwt = new SignJWT({ tenant_id: 'identity-tenant', ...payload })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject('identity-user');
  if (opts.iat !== null) jwt = jwt.setIssuedAt(opts.iat);
  if (opts.exp !== null) jwt = jwt.setExpirationTime(opts.exp ?? Math.floor(Date.now() / 1000) + 3600);
  return jwt.sign(hsKey());
}

async function status(url: string, token: string): Promise<number> {
  return (await callAt(url, 'GET', '/v1/agents', { token })).status;
}

describe('hostile identity: bearer tokens', function () {
  this.timeout(60_000);
  const closers: Array<() => Promise<void>> = [];
  after(async () => {
    for (const c of closers) await c().catch(() => undefined);
  });
  async function gw(auth: Auth) {
    const g = await gatewayWith(auth);
    closers.push(g.close);
    return g.url;
  }

  it('a token without exp is 401 by default (empty body); AUTH_REQUIRE_EXP=false accepts it', async () => {
    const noExp = await hs256({}, { exp: null });
    const res = await callAt(stack().apiUrl, 'GET', '/v1/agents', { token: noExp });
    assert.equal(res.status, 401);
    assert.equal(res.text, '');
    assert.equal(await status(stack().apiUrl, await hs256({})), 200);
    assert.equal(await status(await gw({ requireExp: false }), noExp), 200);
  });

  it('AUTH_ISSUER and AUTH_AUDIENCE: checked when set, ignored when not', async () => {
    const url = await gw({ issuer: 'https://idp.example', audience: 'agent-gateway' });
    assert.equal(await status(url, await hs256({ iss: 'https://idp.example', aud: 'agent-gateway' })), 200);
    assert.equal(await status(url, await hs256({ iss: 'https://evil.example', aud: 'agent-gateway' })), 401);
    assert.equal(await status(url, await hs256({ iss: 'https://idp.example', aud: 'another-service' })), 401);
    assert.equal(await status(url, await hs256({ iss: 'https://idp.example' })), 401);
    assert.equal(await status(url, await hs256({})), 401);
    // Unset: a token carrying either claim is judged on the rest.
    assert.equal(await status(stack().apiUrl, await hs256({ iss: 'https://anyone.example', aud: 'x' })), 200);
  });

  it('AUTH_MAX_TOKEN_AGE: an old iat, or none, is 401; a remembered token stops working when it grows too old', async () => {
    const url = await gw({ maxTokenAgeSeconds: 2 });
    const now = Math.floor(Date.now() / 1000);
    assert.equal(await status(url, await hs256({}, { iat: now - 3600 })), 401);
    assert.equal(await status(url, await hs256({}, { iat: null })), 401);
    const fresh = await hs256({}, { iat: now });
    assert.equal(await status(url, fresh), 200);
    assert.equal(await status(url, fresh), 200, 'the second use is answered from the verified-token cache');
    // Refused once it is older than 2 s, though the cache has it: by 3.1 s at the latest, as
    // its iat is in whole seconds.
    await waitFor(async () => (await status(url, fresh)) === 401, {
      timeoutMs: 3_100,
      everyMs: 100,
      what: 'the remembered token to be refused as too old',
    });
    assert.ok(Date.now() / 1000 >= now + 2, 'refused only once it was too old');
  });

  it('an HS256 secret shorter than 32 bytes is refused at start with one line naming the variable', () => {
    const env = { DATABASE_URL: 'postgres://x@127.0.0.1/x', AUTH_JWT_SECRET: 'short-secret' };
    assert.throws(
      () => loadGatewayConfig(env),
      (err: Error) =>
        /^invalid configuration: AUTH_JWT_SECRET is 12 bytes; HS256 needs at least 32/.test(err.message) &&
        !err.message.includes('\n'),
    );
    assert.doesNotThrow(() => loadGatewayConfig({ ...env, AUTH_JWT_SECRET: 'x'.repeat(32) }));
  });

  it('JWKS (ES256 from a served key set): exp, issuer and audience hold the same way', async () => {
    const { publicKey, privateKey } = await generateKeyPair('ES256');
    const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', alg: 'ES256', use: 'sig' };
    const jwksServer: Server = createServer((_req, res) => {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ keys: [jwk] }));
    });
    await new Promise<void>((r) => jwksServer.listen(0, '127.0.0.1', r));
    closers.push(() => new Promise<void>((r) => jwksServer.close(() => r())));
    const jwksUrl = `http://127.0.0.1:${(jwksServer.address() as AddressInfo).port}/jwks.json`;
    const url = await gw({ jwksUrl, jwtSecret: undefined, issuer: 'https://idp.example', audience: 'agent-gateway' });
    const es256 = (claims: JWTPayload, exp = true) => {
      let jwt = new SignJWT({ tenant_id: 'identity-tenant', ...claims })
        .setProtectedHeader({ alg: 'ES256', kid: 'k1' })
        .setSubject('u')
        .setIssuedAt();
      if (exp) jwt = jwt.setExpirationTime('10m');
      return jwt.sign(privateKey);
    };
    assert.equal(await status(url, await es256({ iss: 'https://idp.example', aud: 'agent-gateway' })), 200);
    assert.equal(await status(url, await es256({ iss: 'https://idp.example', aud: 'agent-gateway' }, false)), 401);
    assert.equal(await status(url, await es256({ iss: 'https://other.example', aud: 'agent-gateway' })), 401);
    assert.equal(await status(url, await es256({ iss: 'https://idp.example', aud: 'nope' })), 401);
    // An HS256 token signed with the stack's secret means nothing to a JWKS gateway.
    assert.equal(await status(url, await hs256({ iss: 'https://idp.example', aud: 'agent-gateway' })), 401);
  });

  it('npm run token mints what a gateway with AUTH_ISSUER and AUTH_AUDIENCE accepts', async () => {
    const url = await gw({ issuer: 'https://idp.example', audience: 'agent-gateway' });
    const minted = await new Promise<string>((resolve, reject) => {
      const child = spawn(
        process.execPath,
        ['scripts/token.ts', '--tenant', 'identity-tenant', '--user', 'u', '--ttl', '5m'],
        {
          env: {
            ...process.env,
            AUTH_JWT_SECRET: stack().config.auth.jwtSecret!,
            AUTH_ISSUER: 'https://idp.example',
            AUTH_AUDIENCE: 'agent-gateway',
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let out = '';
      child.stdout.on('data', (c: Buffer) => (out += c.toString()));
      child.once('error', reject);
      child.once('exit', (code) => (code === 0 ? resolve(out.trim()) : reject(new Error(`token exited ${code}`))));
    });
    assert.equal(await status(url, minted), 200);
  });
});
