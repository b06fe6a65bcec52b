// SSRF: the create-time matrix of upstream URLs, the connect-time check of resolved
// addresses, DNS rebinding (a resolver that answers differently on each lookup), and one HTTP
// path through a gateway whose allow-list is empty. The tests' resolver is a fake DNS (named
// so): it only decides which address a name resolves to; connecting is real.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import { stack } from './support/stack.ts';
import {
  createAgent,
  rawUpstream,
  readAll,
  startProxyApp,
  waitForRow,
  type RawUpstream,
} from './support/proxy-helpers.ts';
import { isAllowedAddress, isAllowedUpstream, isInternalAddress } from '../gateway/upstream/ssrf.ts';
import { resolveChecked, type Resolver } from '../gateway/upstream/dispatcher.ts';
import { createUpstreamClient, UpstreamError, type UpstreamClient } from '../gateway/upstream/client.ts';
import { BlockedAddressError } from '../gateway/upstream/errors.ts';
import { readFile } from 'node:fs/promises';
import { createFacilitatorClient } from '../api/payment/facilitator-client.ts';
import { devCa, newAccount, newPayTo, newPayer, requirements, settleBody, signPayment } from './support/x402.ts';
import { issueClientCert } from '../scripts/dev/pki.ts';

/** Fake DNS: each lookup of a name returns the next answer in its script (the last one repeats). */
function rebindingResolver(script: Record<string, string[][]>): Resolver & { lookups: string[] } {
  const counts = new Map<string, number>();
  const lookups: string[] = [];
  const resolver = async (hostname: string) => {
    lookups.push(hostname);
    const answers = script[hostname];
    if (!answers) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
    const n = counts.get(hostname) ?? 0;
    counts.set(hostname, n + 1);
    return answers[Math.min(n, answers.length - 1)].map((address) => ({
      address,
      family: address.includes(':') ? 6 : 4,
    }));
  };
  return Object.assign(resolver, { lookups });
}

const INTERNAL_URLS = [
  'http://127.0.0.1/',
  'http://127.1/',
  'http://127.255.255.254:8080/',
  'http://2130706433/',
  'http://0x7f000001/',
  'http://017700000001/',
  'http://0177.0.0.1/',
  'http://[::1]/',
  'http://[0:0:0:0:0:0:0:1]/',
  'http://[::ffff:127.0.0.1]/',
  'http://[::ffff:7f00:1]/',
  'http://[::ffff:a9fe:a9fe]/',
  'http://[64:ff9b::7f00:1]/',
  'http://[2002:7f00:1::1]/',
  'http://10.1.2.3/',
  'http://172.16.0.1/',
  'http://172.31.255.255/',
  'http://192.168.1.1/',
  'http://169.254.169.254/latest/meta-data/',
  'http://100.64.0.1/',
  'http://0.0.0.0/',
  'http://0/',
  'http://[::]/',
  'http://[fe80::1]/',
  'http://[fc00::1]/',
  'http://[fd12:3456::1]/',
  'http://224.0.0.1/',
  'http://[ff02::1]/',
  'http://localhost/',
  'http://LOCALHOST./',
  'http://api.localhost/',
  // Special-purpose IPv6 ranges: local-use NAT64, IPv4-translated, discard-only, Teredo,
  // IPv4-compatible, benchmarking, documentation, deprecated site-local; and IPv4 ones.
  'http://[64:ff9b:1::808:808]/',
  'http://[::ffff:0:808:808]/',
  'http://[::ffff:0:7f00:1]/',
  'http://[100::1]/',
  'http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/',
  'http://[::8.8.8.8]/',
  'http://[::7f00:1]/',
  'http://[2001:2::1]/',
  'http://[2001:db8::1]/',
  'http://[fec0::1]/',
  'http://[5f00::1]/',
  'http://[2002:a00:1::1]/',
  'http://192.0.2.1/',
  'http://198.18.0.1/',
  'http://198.51.100.7/',
  'http://203.0.113.9/',
  'http://240.0.0.1/',
  'http://255.255.255.255/',
  'http://192.0.0.8/',
];
const REFUSED_OTHERWISE = [
  'ftp://example.com/',
  'file:///etc/passwd',
  'http://user:pw@example.com/',
  'not a url',
  'http://[::1/',
];
const PUBLIC_URLS = [
  'https://example.com/agent',
  'http://93.184.216.34/',
  'http://8.8.8.8:8080/x',
  'http://172.32.0.1/',
  'http://[2606:4700:4700::1111]/',
  'http://[::ffff:8.8.8.8]/',
  'http://[64:ff9b::808:808]/',
  'http://[2002:808:808::1]/',
];

describe('SSRF guard', () => {
  describe('create time: the upstream URL', () => {
    it('rejects loopback, private, link-local, unspecified, multicast and mapped forms, and localhost', () => {
      for (const url of INTERNAL_URLS) assert.equal(isAllowedUpstream(url, []), false, url);
      for (const url of REFUSED_OTHERWISE) assert.equal(isAllowedUpstream(url, []), false, url);
      for (const url of PUBLIC_URLS) assert.equal(isAllowedUpstream(url, []), true, url);
    });

    it('exempts what UPSTREAM_ALLOW names: a host, a host:port or a CIDR', () => {
      assert.equal(isAllowedUpstream('http://127.0.0.1:9000/', ['127.0.0.1']), true);
      assert.equal(isAllowedUpstream('http://127.0.0.1:9000/', ['127.0.0.1:9000']), true);
      assert.equal(isAllowedUpstream('http://127.0.0.1:9001/', ['127.0.0.1:9000']), false);
      assert.equal(isAllowedUpstream('http://10.1.2.3/', ['10.0.0.0/8']), true);
      assert.equal(isAllowedUpstream('http://192.168.1.1/', ['10.0.0.0/8']), false);
      assert.equal(isAllowedUpstream('http://internal.example:80/', ['internal.example']), true);
    });

    it('agrees with the agents API: an internal upstream_url is refused with 400', async () => {
      // The stack allows 127.0.0.1 for the tests' own upstreams; everything else internal is refused.
      const token = await stack().token(`tenant-ssrf-${randomUUID()}`);
      for (const upstream_url of [
        'http://169.254.169.254/',
        'http://[::1]/',
        'http://localhost:8080/',
        'http://10.0.0.1/',
      ]) {
        const { call } = await import('./support/http.ts');
        const res = await call('POST', '/v1/agents', { token, json: { name: `ssrf-${randomUUID()}`, upstream_url } });
        assert.equal(res.status, 400, upstream_url);
      }
    });
  });

  describe('connect time: the resolved address', () => {
    it('judges every resolved address, mapped forms by their IPv4', () => {
      for (const a of [
        '127.0.0.1',
        '10.0.0.1',
        '169.254.169.254',
        '::1',
        '::ffff:127.0.0.1',
        '::ffff:7f00:1',
        '64:ff9b::a00:1',
        'fe80::1%eth0',
        '::',
        'not-an-ip',
        '64:ff9b:1::808:808',
        '::ffff:0:808:808',
        '100::1',
        '2001::1',
        '::8.8.8.8',
        '2001:db8::1',
        '198.18.0.1',
        '2606:4700:4700::1111%eth0',
      ])
        assert.equal(isInternalAddress(a), true, a);
      for (const a of [
        '93.184.216.34',
        '2606:4700:4700::1111',
        '::ffff:8.8.8.8',
        '64:ff9b::808:808',
        '2002:808:808::1',
      ])
        assert.equal(isInternalAddress(a), false, a);
      assert.equal(isAllowedAddress('rebind.test', '127.0.0.1', '80', []), false);
      assert.equal(isAllowedAddress('rebind.test', '127.0.0.1', '80', ['127.0.0.1']), true);
    });

    it('refuses a name that resolves to an internal address now, whatever it resolved to before (rebinding)', async () => {
      const dns = rebindingResolver({
        'rebind.test': [['93.184.216.34'], ['127.0.0.1']],
        'mixed.test': [['93.184.216.34', '10.0.0.5']],
      });
      assert.deepEqual(await resolveChecked('rebind.test', '80', [], dns), { address: '93.184.216.34', family: 4 });
      await assert.rejects(resolveChecked('rebind.test', '80', [], dns), BlockedAddressError);
      await assert.rejects(resolveChecked('mixed.test', '80', [], dns), BlockedAddressError);
      await assert.rejects(resolveChecked('[::1]', '80', [], dns), BlockedAddressError);
      await assert.rejects(
        resolveChecked('unknown.test', '80', [], dns),
        (err: { code?: string }) => err.code === 'ENOTFOUND',
      );
    });

    describe('through the upstream client', () => {
      let inside: RawUpstream;
      let client: UpstreamClient;
      before(async () => {
        inside = await rawUpstream((req, res) => void readAll(req).then(() => res.end('inside')));
      });
      afterEach(() => client?.close());
      after(() => inside.close());

      const open = (url: string) =>
        client.open({
          url,
          headers: {},
          body: Buffer.from('x'),
          deadlineMs: 2_000,
          deadlineCoversBody: true,
          resendAllowed: false,
        });

      it('never connects to an internal address a name rebinds to, and connects only to the address it checked', async () => {
        // First lookup public (nothing listens there: the connect fails, but not as blocked); then the inside.
        const dns = rebindingResolver({ 'rebind.test': [['93.184.216.34'], ['127.0.0.1']] });
        client = createUpstreamClient({ allow: [], resolver: dns, connectTimeoutMs: 300, retry: { maxAttempts: 1 } });
        const first = await open(`http://rebind.test:${inside.port}/agent`).catch((e: unknown) => e);
        assert.ok(first instanceof UpstreamError && first.errorClass !== 'blocked', `first: ${String(first)}`);
        const second = await open(`http://rebind.test:${inside.port}/agent`).catch((e: unknown) => e);
        assert.ok(second instanceof UpstreamError);
        assert.equal(second.errorClass, 'blocked');
        assert.equal(second.reached, false);
        assert.ok(!second.message.includes('127.0.0.1'));
        assert.equal(inside.hits.length, 0, 'nothing reached the inside');
        assert.deepEqual(dns.lookups, ['rebind.test', 'rebind.test'], 'resolved once per connection, by the guard');
      });

      it('refuses literal internal addresses at connect time too (e.g. an allow-list narrowed after the agent was created)', async () => {
        client = createUpstreamClient({ allow: [], resolver: rebindingResolver({}) });
        for (const url of [inside.url, `http://[::1]:${inside.port}/`, `http://[::ffff:127.0.0.1]:${inside.port}/`]) {
          const err = await open(url).catch((e: unknown) => e);
          assert.ok(err instanceof UpstreamError && err.errorClass === 'blocked', url);
        }
        assert.equal(inside.hits.length, 0);
      });

      it('connects to an allowed address with the original Host header', async () => {
        client = createUpstreamClient({
          allow: ['127.0.0.1'],
          resolver: rebindingResolver({ 'named.test': [['127.0.0.1']] }),
        });
        const res = await open(`http://named.test:${inside.port}/agent`);
        assert.equal(res.status, 200);
        assert.equal(await res.body.text(), 'inside');
        assert.equal(inside.hits.at(-1)?.headers.host, `named.test:${inside.port}`);
      });
    });
  });

  describe('one HTTP path under an empty allow-list', () => {
    it('answers 502 with a coarse body and records blocked, the inside never reached', async () => {
      const inside = await rawUpstream((req, res) => void readAll(req).then(() => res.end('inside')));
      const dns = rebindingResolver({ 'rebind.test': [['127.0.0.1']] });
      const gateway = await startProxyApp(
        { upstream: { ...stack().config.upstream, allow: [] } },
        { upstream: createUpstreamClient({ allow: [], resolver: dns }) },
      );
      try {
        const token = await stack().token(`tenant-ssrf-http-${randomUUID()}`);
        // A public-looking name passes the create-time check; what it resolves to is judged at connect time.
        const agentId = await createAgent(token, { upstream_url: `http://rebind.test:${inside.port}/agent` });
        const res = await request(`${gateway.url}/v1/proxy/${agentId}/stream`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}` },
          body: 'x',
        });
        const text = await res.body.text();
        assert.equal(res.statusCode, 502);
        assert.deepEqual(JSON.parse(text), { error: 'upstream unreachable' });
        assert.ok(!/127\.0\.0\.1|rebind|\d{4,5}/.test(text));
        const row = await waitForRow(String(res.headers['x-gateway-invocation-id']));
        assert.equal(row.status, 'failed');
        assert.equal(row.errorClass, 'blocked');
        assert.equal(inside.hits.length, 0);
      } finally {
        await gateway.close();
        await inside.close();
      }
    });
  });

  describe('the facilitator client', () => {
    const target = async (url: string) => ({
      facilitatorUrl: url,
      ...(await issueClientCert(await devCa(), `ssrf-facilitator-${randomUUID()}`)),
    });
    const port = () => new URL(stack().facilitator.url).port;
    async function body() {
      const payTo = newPayTo();
      return settleBody(
        await signPayment(await newPayer(10_000n), { payTo, value: 1_000n }),
        requirements(payTo, 1_000n),
      );
    }

    it('never connects to a facilitator whose name resolves to an internal address, unless UPSTREAM_ALLOW names it', async () => {
      const inside = await rawUpstream((_req, res) => void res.end('inside'));
      const dns = rebindingResolver({ 'rebind.test': [['127.0.0.1']] });
      const client = createFacilitatorClient({
        caPem: await readFile(stack().infra.pki.files.ca, 'utf8'),
        timeoutMs: 3_000,
        allow: [],
        resolver: dns,
      });
      try {
        const outcome = await client.settle(await target(`https://rebind.test:${inside.port}/`), await body());
        assert.deepEqual(outcome, { ok: false, error: 'settlement_refused' }, 'known not sent, so known not collected');
        assert.equal(inside.hits.length, 0);
        assert.deepEqual(dns.lookups, ['rebind.test']);
      } finally {
        await client.close();
        await inside.close();
      }
    });

    it('settles through the address it checked, the facilitator exempt by UPSTREAM_ALLOW', async () => {
      const dns = rebindingResolver({ localhost: [['127.0.0.1']] });
      const client = createFacilitatorClient({
        caPem: await readFile(stack().infra.pki.files.ca, 'utf8'),
        timeoutMs: 10_000,
        allow: [`127.0.0.1:${port()}`],
        resolver: dns,
      });
      try {
        const account = await newAccount(`ssrf-facilitator-${randomUUID()}`);
        const outcome = await client.settle(
          { facilitatorUrl: `https://localhost:${port()}/`, ...account.cert },
          await body(),
        );
        assert.equal(outcome.ok, true, JSON.stringify(outcome));
        assert.deepEqual(dns.lookups, ['localhost'], 'resolved by the guard, not by plain DNS');
        await account.client.close();
      } finally {
        await client.close();
      }
    });
  });
});
