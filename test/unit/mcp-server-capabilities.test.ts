// What a virtual MCP server offers at initialize from what its members offered
// (gateway/mcp-servers/capabilities.ts): the union of what it federates, `listChanged` when one
// member offering the kind says it, a member that did not answer counted as offering tools.
import assert from 'node:assert/strict';
import { federatedCapabilities } from '../../gateway/mcp-servers/capabilities.ts';

describe('virtual MCP server capabilities', () => {
  it('offers what the members offer together, of what it federates', () => {
    assert.deepEqual(
      federatedCapabilities([
        { tools: {}, logging: {} },
        { tools: { listChanged: true }, prompts: {}, completions: {} },
        { resources: { subscribe: true } },
      ]),
      { tools: { listChanged: true }, prompts: {}, resources: {} },
    );
  });

  it('offers nothing its members do not, and tools for a member that did not answer', () => {
    assert.deepEqual(federatedCapabilities([{ logging: {} }]), {});
    assert.deepEqual(federatedCapabilities([]), {});
    assert.deepEqual(federatedCapabilities([null, { prompts: { listChanged: true } }]), {
      tools: {},
      prompts: { listChanged: true },
    });
  });

  it('ignores what is not an object', () => {
    assert.deepEqual(federatedCapabilities([{ tools: true, prompts: [], resources: null }]), {});
  });
});
