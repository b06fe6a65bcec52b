// Pure parts of the public surface: the rate-limit identity of a client address, the validation
// of a tenant's public_interface, and the bazaar extension built from it (checked with
// @x402/extensions' own validator, as a catalog or client would).
import assert from 'node:assert/strict';
import { validateDiscoveryExtension, type DiscoveryExtension } from '@x402/extensions/bazaar';
import { clientKey } from '../../api/public-url.ts';
import { PublicInterfaceInput } from '../../api/agents/public-interface.ts';
import { bazaarExtensionOf, discoveryExtensionsOf } from '../../api/discovery/bazaar.ts';

describe('client keys of unauthenticated traffic', () => {
  it('keeps an IPv4 address, unwraps an IPv4-mapped one, and keys IPv6 by its /64', () => {
    assert.equal(clientKey('203.0.113.7'), '203.0.113.7');
    assert.equal(clientKey('::ffff:203.0.113.7'), '203.0.113.7');
    assert.equal(clientKey('2001:db8:1:2:aaaa:bbbb:cccc:dddd'), '2001:db8:1:2::/64');
    assert.equal(clientKey('2001:db8:1:2::1'), '2001:db8:1:2::/64');
    assert.equal(clientKey('2001:0DB8:0001:0002:0:0:0:1'), '2001:db8:1:2::/64');
    assert.equal(clientKey('2001:db8::1'), '2001:db8:0:0::/64');
    assert.equal(clientKey('::1'), '0:0:0:0::/64');
    assert.equal(clientKey('fe80::1%eth0'), 'fe80:0:0:0::/64');
    assert.equal(clientKey('64:ff9b::203.0.113.7'), '64:ff9b:0:0::/64');
    assert.equal(clientKey('unknown'), 'unknown');
    // Two interfaces of one /64 are one client; two /64s are two.
    assert.equal(clientKey('2001:db8:1:2::a'), clientKey('2001:db8:1:2::b'));
    assert.notEqual(clientKey('2001:db8:1:2::a'), clientKey('2001:db8:1:3::a'));
  });
});

describe('public_interface', () => {
  const refused = (value: unknown) => {
    const parsed = PublicInterfaceInput.safeParse(value);
    assert.equal(parsed.success, false, JSON.stringify(value));
    return parsed.error!.issues[0].message;
  };

  it('takes JSON Schemas and JSON object examples', () => {
    const value = {
      input_schema: { type: 'object', properties: { q: { type: 'string', minLength: 1 } }, required: ['q'] },
      input_example: { q: 'x' },
      output_example: { results: [] },
      tools: { search: { description: 'Search', input_schema: { type: 'object' }, example: { q: 'x' } } },
    };
    assert.deepEqual(PublicInterfaceInput.parse(value), value);
  });

  it('refuses what is not a JSON Schema, too large, too deep, or shaped like a credential', () => {
    assert.match(refused({ input_schema: { type: 'nope' } }), /JSON Schema/);
    assert.match(refused({ tools: { t: { input_schema: { required: 'q' } } } }), /JSON Schema/);
    assert.match(refused({ input_example: 'a string' }), /JSON object/);
    assert.match(refused({ output_example: { x: 'y'.repeat(17_000) } }), /larger than/);
    let deep: Record<string, unknown> = {};
    for (let i = 0; i < 17; i++) deep = { d: deep };
    assert.match(refused({ output_example: deep }), /deeper than/);
    for (const secret of [
      'Bearer abcdefghijklmnopqrstuvwxyz',
      'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl',
      '-----BEGIN PRIVATE KEY-----',
      'sk-proj-abcdefghijklmnopqrstuvwxyz',
      'ghp_abcdefghijklmnopqrstuvwxyz0123',
      'AKIAABCDEFGHIJKLMNOP',
    ])
      assert.match(refused({ output_example: { [secret.slice(0, 3)]: secret } }), /credential/, secret);
    // A key is checked too.
    assert.match(refused({ input_example: { 'Bearer abcdefghijklmnopqrstuvwxyz': 1 } }), /credential/);
    assert.match(refused({ extra: 1 }), /./);
  });
});

describe('the bazaar extension of a public agent', () => {
  const described = {
    input_schema: { type: 'object', properties: { city: { type: 'string' } } },
    input_example: { city: 'Lisbon' },
    output_example: { forecast: 'sunny' },
    tools: { search: { input_schema: { type: 'object', properties: { q: { type: 'string' } } }, example: { q: 'x' } } },
  };
  const http = { protocol: 'http' as const, publicDescription: 'Weather', publicInterface: described, public: true };
  const mcp = { ...http, protocol: 'mcp' as const };

  it('declares an http agent as a JSON POST, valid by its own schema', () => {
    const { bazaar } = bazaarExtensionOf(http, null) as { bazaar: DiscoveryExtension };
    assert.deepEqual(validateDiscoveryExtension(bazaar), { valid: true });
    assert.deepEqual(bazaar.info.input, { type: 'http', method: 'POST', bodyType: 'json', body: { city: 'Lisbon' } });
    // Undescribed: any JSON object.
    const bare = bazaarExtensionOf({ ...http, publicInterface: null }, null) as { bazaar: DiscoveryExtension };
    assert.deepEqual(validateDiscoveryExtension(bare.bazaar), { valid: true });
  });

  it('declares an MCP tool with its schema and example, an undescribed tool as any object, no tool as nothing', () => {
    const { bazaar } = bazaarExtensionOf(mcp, 'search') as { bazaar: DiscoveryExtension };
    assert.deepEqual(validateDiscoveryExtension(bazaar), { valid: true });
    assert.equal(bazaar.info.input.type, 'mcp');
    const other = bazaarExtensionOf(mcp, 'other') as { bazaar: { info: { input: Record<string, unknown> } } };
    assert.deepEqual(other.bazaar.info.input.inputSchema, { type: 'object' });
    assert.equal(other.bazaar.info.input.description, 'Weather');
    assert.deepEqual(bazaarExtensionOf(mcp, null), {});
  });

  it('is declared in challenges of public agents only', () => {
    assert.deepEqual(discoveryExtensionsOf({ agent: { ...http, public: false }, mcp: null }), {});
    assert.ok(discoveryExtensionsOf({ agent: http, mcp: null }).bazaar);
    assert.ok(discoveryExtensionsOf({ agent: mcp, mcp: { method: 'tools/call', tool: 'search' } }).bazaar);
    assert.deepEqual(discoveryExtensionsOf({ agent: mcp, mcp: { method: 'tools/list', tool: null } }), {});
  });
});
