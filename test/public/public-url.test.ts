// Behind a load balancer the API sees plain HTTP to an internal address; the URL an x402
// challenge names as its `resource` must still be the one callers use. PUBLIC_URL decides it;
// without it, TRUST_PROXY=true takes X-Forwarded-Proto / X-Forwarded-Host from the load
// balancer; without either the request's own address is used and forwarded headers are
// ignored, so a caller cannot choose the URL the gateway names. PUBLIC_URL is checked at start.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { decodePaymentRequiredHeader } from '@x402/core/http';
import { stack } from '../support/stack.ts';
import { callAt, uniqueName } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startCapturedGateway, type ExtraGateway } from '../support/catalog.ts';
import { newPayTo } from '../support/x402.ts';
import { loadGatewayConfig, type GatewayConfig } from '../../gateway/config.ts';
import { ConfigError } from '../../lib/config.ts';

const FORGED = { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'attacker.example' };

describe('the public URL in x402 challenges (PUBLIC_URL, TRUST_PROXY)', function () {
  this.timeout(60_000);
  let upstream: TestUpstream;
  let token: string;
  const gateways: ExtraGateway[] = [];

  before(async () => {
    upstream = await startUpstream();
    token = await stack().token(`public-url-${randomUUID()}`);
  });
  after(async () => {
    for (const g of gateways) await g.close();
    await upstream.close();
  });

  async function gateway(publicAddress: GatewayConfig['publicAddress']): Promise<string> {
    const g = await startCapturedGateway({ publicAddress });
    gateways.push(g);
    return g.url;
  }

  /** A priced agent, created through the stack's API (every gateway shares its database). */
  async function pricedAgent(): Promise<string> {
    const created = await callAt(stack().apiUrl, 'POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('public-url'),
        upstream_url: upstream.url,
        pricing: { amount: '1000', asset: 'USDC', network: 'base', pay_to: newPayTo() },
      },
    });
    assert.equal(created.status, 201, created.text);
    return created.json.id as string;
  }

  /** The resource both dialects of a 402 name: the v1 body's and the PAYMENT-REQUIRED header's. */
  async function challengedResource(base: string, path: string, headers: Record<string, string> = {}) {
    const res = await callAt(base, 'POST', path, { token, body: 'hello', headers });
    assert.equal(res.status, 402, res.text);
    const v1 = res.json.accepts[0].resource as string;
    const v2 = decodePaymentRequiredHeader(res.headers['payment-required'] as string).resource.url;
    assert.equal(v2, v1, 'both dialects name the same resource');
    return v1;
  }

  it('PUBLIC_URL (with a path prefix) is the resource on the transactional and streaming paths, whatever the headers say', async () => {
    const base = await gateway({ url: 'https://gateway.example.com/edge', trustProxy: true });
    const agent = await pricedAgent();
    assert.equal(
      await challengedResource(base, `/v1/proxy/${agent}?mode=a`, { ...FORGED, host: 'attacker.example' }),
      `https://gateway.example.com/edge/v1/proxy/${agent}?mode=a`,
    );
    assert.equal(
      await challengedResource(base, `/v1/proxy/${agent}/stream`, FORGED),
      `https://gateway.example.com/edge/v1/proxy/${agent}/stream`,
    );
  });

  it('TRUST_PROXY=true: the scheme and host the load balancer forwards; of a list, the last entry; malformed values ignored', async () => {
    const base = await gateway({ trustProxy: true });
    const own = new URL(base).host;
    const agent = await pricedAgent();
    const path = `/v1/proxy/${agent}`;
    assert.equal(
      await challengedResource(base, path, { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'api.example.net' }),
      `https://api.example.net${path}`,
    );
    assert.equal(
      await challengedResource(`${base}`, `${path}/stream`, {
        'x-forwarded-proto': 'http, https',
        'x-forwarded-host': 'attacker.example, api.example.net:8443',
      }),
      `https://api.example.net:8443${path}/stream`,
      'a value the caller put first is not the one the load balancer appended',
    );
    assert.equal(
      await challengedResource(base, path, {
        'x-forwarded-proto': 'javascript',
        'x-forwarded-host': 'evil.example/x?',
      }),
      `http://${own}${path}`,
    );
  });

  it('without TRUST_PROXY forwarded headers are ignored: a caller cannot choose the resource', async () => {
    const base = await gateway({ trustProxy: false });
    const own = new URL(base).host;
    const agent = await pricedAgent();
    assert.equal(await challengedResource(base, `/v1/proxy/${agent}`, FORGED), `http://${own}/v1/proxy/${agent}`);
    assert.equal(
      await challengedResource(base, `/v1/proxy/${agent}/stream`, FORGED),
      `http://${own}/v1/proxy/${agent}/stream`,
    );
  });
});

describe('PUBLIC_URL and TRUST_PROXY settings', function () {
  this.timeout(30_000);
  const env = (extra: Record<string, string>) => ({
    AUTH_JWT_SECRET: 'x'.repeat(32),
    TOKEN_ADDRESS: `0x${'0'.repeat(40)}`,
    ...extra,
  });

  it('a base URL is kept without its trailing slash; TRUST_PROXY is off unless set', () => {
    const config = loadGatewayConfig(env({ PUBLIC_URL: 'https://Gateway.Example.com/edge/' }));
    assert.deepEqual(config.publicAddress, { url: 'https://gateway.example.com/edge', trustProxy: false });
    assert.deepEqual(loadGatewayConfig(env({ TRUST_PROXY: 'true' })).publicAddress, {
      url: undefined,
      trustProxy: true,
    });
  });

  for (const bad of [
    'gateway.example.com',
    'ftp://gateway.example.com',
    'https://u:p@gw.example',
    'https://gw.example/?a=1',
  ]) {
    it(`PUBLIC_URL=${bad} is one problem line naming the variable`, () => {
      assert.throws(
        () => loadGatewayConfig(env({ PUBLIC_URL: bad })),
        (err: unknown) =>
          err instanceof ConfigError && err.problems.length === 1 && /^PUBLIC_URL must be /.test(err.problems[0]),
      );
    });
  }

  it('the API refuses a bad PUBLIC_URL and TRUST_PROXY at start, one line each, exit 2, no stack trace', async () => {
    const child = spawn(process.execPath, ['api/main.ts'], {
      env: {
        ...process.env,
        ...env({ PUBLIC_URL: 'not a url', TRUST_PROXY: 'yes', PORT: '0', API_METRICS_PORT: '0' }),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const code = await new Promise<number | null>((r) => child.once('exit', r));
    assert.equal(code, 2, stderr);
    const lines = stderr.trim().split('\n');
    assert.match(lines[0], /^api: invalid configuration \(/);
    assert.ok(
      lines.some((l) => /^ {2}PUBLIC_URL must be /.test(l)),
      stderr,
    );
    assert.ok(
      lines.some((l) => /^ {2}TRUST_PROXY must be one of true, false$/.test(l)),
      stderr,
    );
    assert.doesNotMatch(stderr, /^\s+at /m);
  });
});
