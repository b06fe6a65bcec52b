// What a virtual MCP server says it offers at initialize: what its members offer together, of
// what it federates (tools, prompts, resources; `listChanged` when a member offering the kind
// says it, since the server passes the member's notification on). A member that did not answer
// its initialize in time is taken to offer tools, what every MCP agent is federated for, so that
// a member slow at the start is not out of the session for good.
const FEDERATED = ['tools', 'prompts', 'resources'] as const;
type Federated = (typeof FEDERATED)[number];

export type ServerCapabilities = Partial<Record<Federated, { listChanged?: true }>>;

/** The capabilities of the server from its members' (null: a member that did not answer). */
export function federatedCapabilities(members: ReadonlyArray<Record<string, unknown> | null>): ServerCapabilities {
  const offered: ServerCapabilities = {};
  for (const member of members) {
    for (const kind of FEDERATED) {
      const own = member === null ? (kind === 'tools' ? {} : undefined) : member[kind];
      if (own === null || typeof own !== 'object' || Array.isArray(own)) continue;
      const listChanged = (own as { listChanged?: unknown }).listChanged === true;
      offered[kind] = listChanged || offered[kind]?.listChanged ? { listChanged: true } : {};
    }
  }
  return offered;
}
