// The SSRF guard's decisions (gateway/upstream/ssrf.ts, gateway/upstream/dispatcher.ts) without a
// network: the create-time matrix of upstream URLs (every literal form of an internal address,
// whatever the notation), UPSTREAM_ALLOW's exemptions, the connect-time check of resolved
// addresses, DNS rebinding through a fake resolver, and properties over whole address ranges.
// test/security/ssrf.test.ts takes the same rules through real connections and the agents API.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  isAllowedAddress,
  isAllowedUpstream,
  isInternalAddress,
  upstreamRefusal,
} from '../../gateway/upstream/ssrf.ts';
import { resolveChecked } from '../../gateway/upstream/dispatcher.ts';
import { BlockedAddressError } from '../../gateway/upstream/errors.ts';
import { rebindingResolver } from '../support/fake-dns.ts';

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

describe('SSRF guard (pure)', () => {
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
  });
});

describe('SSRF guard: why a URL is refused', () => {
  it('names the cause, the class of an internal address and the UPSTREAM_ALLOW entry that would admit it', () => {
    assert.deepEqual(upstreamRefusal('not a url', []), { cause: 'url' });
    assert.deepEqual(upstreamRefusal('gopher://example.com/', []), { cause: 'scheme' });
    assert.deepEqual(upstreamRefusal('http://u:p@example.com/', []), { cause: 'credentials' });
    assert.deepEqual(upstreamRefusal('http://LocalHost./x', []), { cause: 'localhost', hostPort: 'localhost:80' });
    assert.deepEqual(upstreamRefusal('https://127.1/', []), {
      cause: 'internal',
      class: 'loopback',
      hostPort: '127.0.0.1:443',
    });
    assert.deepEqual(upstreamRefusal('http://10.0.0.1:8080/', []), {
      cause: 'internal',
      class: 'private',
      hostPort: '10.0.0.1:8080',
    });
    assert.deepEqual(upstreamRefusal('http://[fe80::1]:8080/', []), {
      cause: 'internal',
      class: 'link-local',
      hostPort: 'fe80::1',
    });
    assert.deepEqual(upstreamRefusal('http://0.0.0.0/', []), {
      cause: 'internal',
      class: 'unspecified',
      hostPort: '0.0.0.0:80',
    });
    assert.deepEqual(upstreamRefusal('http://224.0.0.1/', []), {
      cause: 'internal',
      class: 'reserved',
      hostPort: '224.0.0.1:80',
    });
    assert.deepEqual(upstreamRefusal('http://100.64.0.1/', []), {
      cause: 'internal',
      class: 'private',
      hostPort: '100.64.0.1:80',
    });
    // The entry it names admits it.
    for (const url of ['https://127.1/', 'http://10.0.0.1:8080/', 'http://[fe80::1]:8080/', 'http://LocalHost./x']) {
      const refusal = upstreamRefusal(url, []);
      assert.ok(refusal && 'hostPort' in refusal);
      assert.equal(upstreamRefusal(url, [refusal.hostPort]), null, url);
    }
  });

  it('leaves a name to the connect-time check: only its literal form is judged at create time', () => {
    assert.equal(upstreamRefusal('http://internal.corp/', []), null);
    assert.equal(isAllowedAddress('internal.corp', '10.0.0.1', '80', []), false);
    assert.equal(isAllowedAddress('internal.corp', '10.0.0.1', '80', ['internal.corp']), true);
    assert.equal(isAllowedAddress('internal.corp', '10.0.0.1', '80', ['internal.corp:80']), true);
    assert.equal(isAllowedAddress('internal.corp', '10.0.0.1', '443', ['internal.corp:80']), false);
    assert.equal(isAllowedAddress('internal.corp', '10.0.0.1', '80', ['10.0.0.0/8']), true);
    assert.equal(isAllowedAddress('internal.corp', '10.0.0.1', '80', ['fd00::/8']), false);
  });
});

describe('SSRF guard: properties over address ranges', () => {
  const octet = fc.integer({ min: 0, max: 255 });
  const v4 = fc.tuple(octet, octet, octet, octet);
  const dotted = (o: number[]) => o.join('.');
  const hex16 = (a: number, b: number) => ((a << 8) | b).toString(16);

  it('refuses every address of the private, loopback, link-local and CGNAT ranges', () => {
    const inRange = fc.oneof(
      v4.map(([, b, c, d]) => [10, b, c, d]),
      v4.map(([, b, c, d]) => [172, 16 + (b % 16), c, d]),
      v4.map(([, , c, d]) => [192, 168, c, d]),
      v4.map(([, b, c, d]) => [127, b, c, d]),
      v4.map(([, , c, d]) => [169, 254, c, d]),
      v4.map(([, b, c, d]) => [100, 64 + (b % 64), c, d]),
    );
    fc.assert(
      fc.property(inRange, (o) => {
        assert.equal(isInternalAddress(dotted(o)), true, dotted(o));
        assert.equal(isAllowedUpstream(`http://${dotted(o)}/`, []), false, dotted(o));
      }),
      { numRuns: 1000 },
    );
  });

  it('judges an IPv4 address the same in every notation a URL or an IPv6 form can carry it', () => {
    fc.assert(
      fc.property(v4, (o) => {
        const verdict = isAllowedUpstream(`http://${dotted(o)}/`, []);
        const n = ((o[0] << 24) >>> 0) + (o[1] << 16) + (o[2] << 8) + o[3];
        for (const url of [
          `http://${n}/`, // one decimal number
          `http://0x${n.toString(16)}/`, // hexadecimal
          `http://0${n.toString(8)}/`, // octal
          `http://${o.map((x) => '0x' + x.toString(16)).join('.')}/`,
          `http://[::ffff:${dotted(o)}]/`, // IPv4-mapped
          `http://[::ffff:${hex16(o[0], o[1])}:${hex16(o[2], o[3])}]/`,
          `http://[64:ff9b::${hex16(o[0], o[1])}:${hex16(o[2], o[3])}]/`, // well-known NAT64
          `http://[2002:${hex16(o[0], o[1])}:${hex16(o[2], o[3])}::1]/`, // 6to4
        ])
          assert.equal(isAllowedUpstream(url, []), verdict, `${url} (${dotted(o)})`);
        // At connect time too.
        assert.equal(isInternalAddress(`::ffff:${dotted(o)}`), isInternalAddress(dotted(o)), dotted(o));
      }),
      { numRuns: 1000 },
    );
  });

  it('refuses IPv6 unique-local, link-local and multicast addresses', () => {
    const word = fc.integer({ min: 0, max: 0xffff }).map((w) => w.toString(16));
    const rest = fc.array(word, { minLength: 7, maxLength: 7 });
    const prefixed = fc.oneof(
      fc.tuple(fc.integer({ min: 0xfc00, max: 0xfdff }), rest),
      fc.tuple(fc.integer({ min: 0xfe80, max: 0xfebf }), rest),
      fc.tuple(fc.integer({ min: 0xff00, max: 0xffff }), rest),
    );
    fc.assert(
      fc.property(prefixed, ([first, others]) => {
        const address = [first.toString(16), ...others].join(':');
        assert.equal(isInternalAddress(address), true, address);
        assert.equal(isAllowedUpstream(`http://[${address}]/`, []), false, address);
      }),
      { numRuns: 500 },
    );
  });
});
