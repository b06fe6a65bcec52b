// JSON-RPC members the gateway reads (gateway/jsonrpc/request.ts) sent in other letter case are refused:
// an upstream decoding with Go's encoding/json matches keys ignoring case, so it would read the
// variant where the gateway priced and checked the member as spelled.
import assert from 'node:assert/strict';
import { caseVariantKey } from '../../gateway/jsonrpc/request.ts';
import { parseMcpBody } from '../../api/proxy/mcp.ts';
import { ApiError } from '../../api/errors.ts';

const mcp = (request: Record<string, unknown>) => Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, ...request }));

describe('JSON-RPC members in other letter case', () => {
  it('finds a key that is a name in other case, and nothing else', () => {
    assert.equal(caseVariantKey({ method: 'a', METHOD: 'b' }, ['method']), 'METHOD');
    assert.equal(caseVariantKey({ Name: 'x' }, ['name']), 'Name');
    assert.equal(caseVariantKey({ method: 'a', other: 1 }, ['method']), null);
    assert.equal(caseVariantKey(['method'], ['method']), null);
    assert.equal(caseVariantKey(null, ['method']), null);
  });

  it('refuses an MCP tools/call naming its tool or method twice by case', () => {
    for (const body of [
      mcp({ method: 'tools/list', Method: 'tools/call', params: { name: 'priced' } }),
      mcp({ method: 'tools/call', params: { name: 'free', NAME: 'priced' } }),
    ])
      assert.throws(
        () => parseMcpBody(body),
        (err: unknown) => err instanceof ApiError && err.status === 400,
      );
    assert.equal(
      parseMcpBody(mcp({ method: 'tools/call', params: { name: 'free', arguments: { Name: 1 } } })).tool,
      'free',
    );
  });
});
