// Compression of the gateway's own answers, and none of proxied ones (api/compression.ts): a
// management answer is gzip or brotli when the caller accepts it and plain otherwise; an
// upstream's gzip body reaches the caller byte for byte with its Content-Encoding, and a plain
// one plain, even when the caller accepts gzip, on the lean path and through the router alike.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { brotliDecompressSync, gunzipSync, gzipSync } from 'node:zlib';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { createAgent, rawUpstream, type RawUpstream } from '../support/proxy-helpers.ts';

async function raw(path: string, headers: Record<string, string>, method: 'GET' | 'POST' = 'GET', body?: string) {
  const res = await request(`${stack().apiUrl}${path}`, { method, headers, body });
  return { status: res.statusCode, headers: res.headers, bytes: Buffer.from(await res.body.arrayBuffer()) };
}

describe('compression', function () {
  this.timeout(60_000);
  let token: string;
  before(async () => {
    token = await stack().token(`tenant-compress-${randomUUID()}`);
    // Enough agents that their list is well over the 1 KiB threshold.
    for (let i = 0; i < 8; i++) await createAgent(token, { description: `agent ${i} `.repeat(20) });
  });

  it('compresses management answers with gzip or brotli when accepted, and not otherwise', async () => {
    const auth = { authorization: `Bearer ${token}` };
    const plain = await raw('/v1/agents?limit=100', auth);
    assert.equal(plain.status, 200);
    assert.equal(plain.headers['content-encoding'], undefined);
    const listed = JSON.parse(plain.bytes.toString()) as { data: unknown[] };
    assert.ok(plain.bytes.length > 1024, 'the list is over the threshold');

    const gzip = await raw('/v1/agents?limit=100', { ...auth, 'accept-encoding': 'gzip' });
    assert.equal(gzip.headers['content-encoding'], 'gzip');
    assert.match(String(gzip.headers.vary), /accept-encoding/i);
    assert.deepEqual(JSON.parse(gunzipSync(gzip.bytes).toString()), listed);
    assert.ok(gzip.bytes.length < plain.bytes.length);

    const br = await raw('/v1/agents?limit=100', { ...auth, 'accept-encoding': 'gzip, br' });
    assert.equal(br.headers['content-encoding'], 'br');
    assert.deepEqual(JSON.parse(brotliDecompressSync(br.bytes).toString()), listed);

    // The API description too (public, large).
    const doc = await raw('/v1/openapi.json', { 'accept-encoding': 'br' });
    assert.equal(doc.headers['content-encoding'], 'br');
    assert.ok(JSON.parse(brotliDecompressSync(doc.bytes).toString()).openapi);
  });

  describe('proxied answers pass as the upstream sent them', () => {
    const text = JSON.stringify({ words: 'an upstream answer '.repeat(200) });
    const zipped = gzipSync(Buffer.from(text));
    let upstream: RawUpstream;
    before(async () => {
      upstream = await rawUpstream((req, res) => {
        req.resume();
        req.on('end', () => {
          const encoded = req.url?.includes('gz') ?? false;
          res.writeHead(200, {
            'content-type': 'application/json',
            ...(encoded ? { 'content-encoding': 'gzip' } : {}),
          });
          res.end(encoded ? zipped : text);
        });
      }, '/');
    });
    after(() => upstream.close());

    for (const [name, suffix] of [
      ['the lean path', '/stream'],
      ['the router (a trailing slash)', '/stream/'],
    ] as const) {
      it(`${name}: a gzip body keeps its bytes and Content-Encoding; a plain one is not compressed`, async () => {
        const gz = await createAgent(token, { upstream_url: `${upstream.url}gz` });
        const plain = await createAgent(token, { upstream_url: `${upstream.url}plain` });
        const headers = { authorization: `Bearer ${token}`, 'accept-encoding': 'gzip, br' };
        const encoded = await raw(`/v1/proxy/${gz}${suffix}`, headers, 'POST', 'x');
        assert.equal(encoded.status, 200);
        assert.equal(encoded.headers['content-encoding'], 'gzip');
        assert.deepEqual(encoded.bytes, zipped, 'the upstream’s bytes, not decompressed or compressed again');
        const passed = await raw(`/v1/proxy/${plain}${suffix}`, headers, 'POST', 'x');
        assert.equal(passed.status, 200);
        assert.equal(passed.headers['content-encoding'], undefined);
        assert.equal(passed.bytes.toString(), text);
      });
    }
  });
});
