// A method a path does not serve (TRACE, or any standard one it lacks) is a 405 with `Allow`
// naming the path's methods and an `{error}` body, on every path the API serves: the probes,
// the API description and its page, the console, the JWKS, the management API and the proxy. It comes
// before authentication, as a 404 for an unknown path does. Unknown paths stay 404.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { stack } from '../support/stack.ts';
import { call } from '../support/http.ts';

const AGENT = 'agt_0190a0a0-0000-7000-8000-000000000000';
const INVOCATION = 'inv_0190a0a0-0000-7000-8000-000000000000';
const STANDARD = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'];

type Served = { path: string; allow: string[] };

/** Every path of the live API description, made concrete, with the methods it serves (HEAD with GET). */
async function servedPaths(): Promise<Served[]> {
  const doc = (await call('GET', '/v1/openapi.json')).json as { paths: Record<string, Record<string, unknown>> };
  return Object.entries(doc.paths).map(([template, ops]) => {
    const methods = Object.keys(ops).map((m) => m.toUpperCase());
    if (methods.includes('GET')) methods.push('HEAD');
    return {
      path: template.replace('{id}', AGENT).replace('{inv_id}', INVOCATION).replace('{invId}', INVOCATION),
      allow: methods.sort(),
    };
  });
}

const allowOf = (header: unknown) =>
  String(header ?? '')
    .split(',')
    .map((m) => m.trim())
    .filter(Boolean)
    .sort();

describe('a method a path does not serve', () => {
  let served: Served[];
  let token: string;
  before(async () => {
    served = await servedPaths();
    token = await stack().token(`methods-${randomUUID()}`);
  });

  it('the API description names the paths this checks (probes, description, JWKS, proxy)', () => {
    const paths = served.map((s) => s.path);
    for (const path of [
      '/healthz',
      '/readyz',
      '/version',
      '/v1/openapi.json',
      '/docs',
      '/console',
      '/console/assets/{file}',
      '/.well-known/jwks.json',
      `/v1/proxy/${AGENT}`,
      `/v1/proxy/${AGENT}/stream`,
      `/v1/proxy/${AGENT}/invocations/${INVOCATION}`,
    ])
      assert.ok(paths.includes(path), `${path} is described`);
  });

  it('TRACE is a 405 with Allow and {error} on every served path, with or without a token', async () => {
    for (const { path, allow } of served) {
      for (const opts of [{}, { token }]) {
        const res = await call('TRACE', path, opts);
        assert.equal(res.status, 405, `TRACE ${path}: ${res.status} ${res.text}`);
        assert.deepEqual(allowOf(res.headers.allow), allow, `TRACE ${path}: Allow`);
        assert.deepEqual(res.json, { error: 'method not allowed' }, `TRACE ${path}: body`);
      }
    }
  });

  it('every standard method a path lacks is a 405 with Allow', async () => {
    for (const { path, allow } of served) {
      for (const method of STANDARD.filter((m) => !allow.includes(m))) {
        const res = await call(method, path, { token, ...(method === 'GET' ? {} : { json: {} }) });
        assert.equal(res.status, 405, `${method} ${path}: ${res.status} ${res.text}`);
        assert.deepEqual(allowOf(res.headers.allow), allow, `${method} ${path}: Allow`);
        if (method !== 'HEAD') assert.deepEqual(res.json, { error: 'method not allowed' });
      }
    }
  });

  it('OPTIONS names the methods with a 204', async () => {
    for (const { path, allow } of served) {
      const res = await call('OPTIONS', path);
      assert.equal(res.status, 204, `OPTIONS ${path}: ${res.status}`);
      assert.deepEqual(allowOf(res.headers.allow), allow, `OPTIONS ${path}: Allow`);
    }
  });

  it('an unknown path stays a 404 for any method', async () => {
    for (const path of ['/nowhere', '/v1', '/v1/nowhere', `/v1/agents/${AGENT}/nowhere`, '/healthz/x']) {
      for (const method of ['TRACE', 'GET', 'DELETE', 'OPTIONS']) {
        const res = await call(method, path, { token });
        assert.equal(res.status, 404, `${method} ${path}: ${res.status}`);
        assert.equal(res.headers.allow, undefined, `${method} ${path}: no Allow`);
      }
    }
  });

  it('a served method is answered by its route, authentication first', async () => {
    assert.equal((await call('GET', '/v1/agents')).status, 401);
    assert.equal((await call('GET', '/v1/agents', { token })).status, 200);
    assert.equal((await call('GET', '/healthz')).status, 200);
  });
});
