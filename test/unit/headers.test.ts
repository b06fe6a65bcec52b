// Which headers cross the gateway (gateway/upstream/headers.ts, docs/PROXY.md): on the way up
// nothing hop-by-hop, nothing that authenticates the caller to the gateway or pays it, nothing
// the gateway cannot vouch for; on the way down nothing that acts on the gateway's shared
// origin. And what may travel in a header at all (gateway/credentials/header-rules.ts), and
// when a caller's X-Request-ID is kept.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { isHeaderSafe } from '../../gateway/credentials/header-rules.ts';
import { forwardableHeaders, forwardableResponseHeaders, requestIdFrom } from '../../gateway/upstream/headers.ts';

/** One character: any ASCII one, control characters included, or now and then one beyond ASCII. */
const anyAsciiOrSome = fc.oneof(
  { weight: 9, arbitrary: fc.string({ unit: 'binary-ascii', minLength: 1, maxLength: 1 }) },
  { weight: 1, arbitrary: fc.constantFrom('é', '\u00a0', '\u2028', '🙂') },
);

const BLOCKED_UP = [
  'connection',
  'keep-alive',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'proxy-authorization',
  'proxy-connection',
  'authorization',
  'cookie',
  'host',
  'content-length',
  'expect',
  'x-payment',
  'payment-signature',
  'x-request-id',
  'forwarded',
  'x-forwarded-for',
  'x-forwarded-host',
  'x-real-ip',
  'x-gateway-tenant',
  'http2-settings',
];

const BLOCKED_DOWN = [
  'connection',
  'transfer-encoding',
  'set-cookie',
  'set-cookie2',
  'clear-site-data',
  'alt-svc',
  'strict-transport-security',
  'public-key-pins',
  'service-worker-allowed',
  'access-control-allow-origin',
  'access-control-allow-credentials',
  'x-gateway-invocation',
  'x-payment-response',
  'payment-response',
  'payment-required',
  'x-request-id',
  'proxy-authenticate',
];

describe('headers across the gateway', () => {
  it('forwards ordinary request headers, lowercased, joining repeated ones', () => {
    assert.deepEqual(
      forwardableHeaders({
        'Content-Type': 'application/json',
        Accept: ['text/plain', 'application/json'],
        'X-Custom': 'v',
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
        'User-Agent': undefined,
      }),
      {
        'content-type': 'application/json',
        accept: 'text/plain, application/json',
        'x-custom': 'v',
        traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      },
    );
  });

  it('drops hop-by-hop headers, the caller’s credentials and payment, and what the gateway cannot vouch for', () => {
    for (const name of BLOCKED_UP)
      for (const spelled of [name, name.toUpperCase()])
        assert.deepEqual(forwardableHeaders({ [spelled]: 'x', keep: 'y' }), { keep: 'y' }, spelled);
  });

  it('drops every header the Connection header names, in either direction', () => {
    const incoming = { connection: 'close, X-Secret-Hop,  x-other ', 'x-secret-hop': '1', 'X-Other': '2', keep: '3' };
    assert.deepEqual(forwardableHeaders(incoming), { keep: '3' });
    assert.deepEqual(forwardableResponseHeaders(incoming), { keep: '3' });
    assert.deepEqual(forwardableHeaders({ connection: ['a', 'b'], a: '1', b: '2', c: '3' }), { c: '3' });
  });

  it('copies ordinary response headers back, repeated ones as they came, and nothing that acts on the shared origin', () => {
    assert.deepEqual(
      forwardableResponseHeaders({ 'Content-Type': 'text/event-stream', link: ['<a>', '<b>'], vary: undefined }),
      { 'content-type': 'text/event-stream', link: ['<a>', '<b>'] },
    );
    for (const name of BLOCKED_DOWN)
      assert.deepEqual(forwardableResponseHeaders({ [name]: 'x', keep: 'y' }), { keep: 'y' }, name);
  });

  it('never forwards a blocked header, whatever else comes with it (property)', () => {
    const name = fc.oneof(
      fc.constantFrom(...BLOCKED_UP, ...BLOCKED_DOWN, 'accept', 'x-custom', 'content-type'),
      fc.stringMatching(/^[a-zA-Z][a-zA-Z0-9-]{0,15}$/),
    );
    fc.assert(
      fc.property(fc.dictionary(name, fc.string({ maxLength: 10 })), (incoming) => {
        const up = forwardableHeaders(incoming);
        for (const key of Object.keys(up)) {
          assert.equal(key, key.toLowerCase());
          assert.ok(!BLOCKED_UP.includes(key) && !/^(proxy-|x-gateway-|x-forwarded-)/.test(key), key);
        }
        const down = forwardableResponseHeaders(incoming);
        for (const key of Object.keys(down))
          assert.ok(!BLOCKED_DOWN.includes(key) && !/^(x-gateway-|access-control-)/.test(key), key);
        // Everything not blocked and not named by Connection gets through.
        for (const [key, value] of Object.entries(incoming)) {
          const lower = key.toLowerCase();
          const hop = String(incoming.connection ?? incoming.Connection ?? '')
            .toLowerCase()
            .split(',')
            .map((h) => h.trim());
          if (
            !hop.includes(lower) &&
            !BLOCKED_UP.includes(lower) &&
            !/^(proxy-|x-gateway-|x-forwarded-)/.test(lower) &&
            Object.keys(incoming).filter((k) => k.toLowerCase() === lower).length === 1
          )
            assert.equal(up[lower], value, key);
        }
      }),
      { numRuns: 500 },
    );
  });

  it('keeps a caller’s X-Request-ID only when it is 1 to 200 visible ASCII characters', () => {
    const make = () => 'made';
    assert.equal(requestIdFrom('abc-123', make), 'abc-123');
    assert.equal(requestIdFrom('x'.repeat(200), make), 'x'.repeat(200));
    for (const bad of [undefined, '', 'x'.repeat(201), 'a b', 'line\nbreak', 'tab\t', 'é', '\u0000'])
      assert.equal(requestIdFrom(bad, make), 'made', JSON.stringify(bad));
  });

  it('lets a secret travel in a header only as visible ASCII without edge spaces', () => {
    for (const ok of ['k', 'sk-abc123', 'Bearer abc', 'a b c', '!~']) assert.equal(isHeaderSafe(ok), true, ok);
    for (const bad of ['', ' k', 'k ', 'k\r\nX-Injected: 1', 'k\n', 'tab\there', 'é', '\u007f', ' '])
      assert.equal(isHeaderSafe(bad), false, JSON.stringify(bad));
    fc.assert(
      fc.property(fc.string({ unit: anyAsciiOrSome, maxLength: 30 }), (secret) => {
        if (isHeaderSafe(secret)) {
          assert.ok(/^[\x20-\x7e]+$/.test(secret));
          assert.equal(secret.trim(), secret);
        }
      }),
      { numRuns: 1000 },
    );
  });
});
