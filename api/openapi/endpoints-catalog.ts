// The catalog operations (agents, credentials, settlement configuration): the zod schemas each
// route parses with and the statuses it answers. Fields are described on the schemas.
import { AgentSuspendInput, AgentUnsuspendInput, agentBodies, type RateCeiling } from '../agents/schema.ts';
import { AgentList, AgentListQuery, AgentPath, AgentView } from '../agents/view.ts';
import {
  CredentialCreateInput,
  CredentialList,
  CredentialListQuery,
  CredentialPath,
  CredentialUpdateInput,
  CredentialView,
} from '../credentials/schema.ts';
import { SettlementConfigInput, SettlementConfigView } from '../settlement/schema.ts';
import { ChannelList, ChannelListQuery, ChannelPath, ChannelView } from '../channels/schema.ts';
import {
  McpServerCreateInput,
  McpServerList,
  McpServerListQuery,
  McpServerPath,
  McpServerRpcInput,
  McpSessionHeader,
  McpStreamSessionHeader,
  McpServerUpdateInput,
  McpServerView,
} from '../mcp-servers/schema.ts';
import { err, notFound, type Operation } from './responses.ts';

/** On an answer that prices an agent in a tenant without settlement configured (an addition to the v1 contract). */
const uncollectedWarning = {
  'X-Gateway-Warning':
    'Present when the agent is priced and its tenant has no settlement configured: payments are verified but not collected.',
};

function agentOperations(ceiling: RateCeiling): Operation[] {
  const bodies = agentBodies(ceiling);
  const path = AgentPath;
  return [
    {
      method: 'post',
      path: '/v1/agents',
      operationId: 'createAgent',
      tag: 'Agents',
      summary: 'Create an agent',
      auth: true,
      description:
        'protocol defaults to http; protocol=mcp requires mcp_transport=streamable_http (rejected for http); pricing requires asset USDC and network base; pricing.tools requires mcp. Status is pending without upstream_url, else active.',
      body: { schema: bodies.create, id: 'AgentCreate', required: true },
      responses: {
        201: { description: 'The created agent.', body: AgentView, headers: uncollectedWarning },
        400: err(
          'Invalid body, missing name, invalid upstream_url, or an invalid protocol/pricing combination; credential_ref naming no credential of the tenant.',
        ),
        409: err(
          'An active or pending agent with the same name exists in the tenant, or the tenant already has TENANT_MAX_AGENTS active or pending agents.',
        ),
      },
    },
    {
      method: 'get',
      path: '/v1/agents',
      operationId: 'listAgents',
      tag: 'Agents',
      summary: 'List agents',
      auth: true,
      description: 'Oldest first. Inactive (deleted) agents are listed only with status=inactive.',
      params: { query: AgentListQuery },
      responses: {
        200: { description: 'A page of agents.', body: AgentList },
        400: err('Invalid filter, limit or cursor; a parameter given twice.'),
      },
    },
    {
      method: 'get',
      path: '/v1/agents/{id}',
      operationId: 'getAgent',
      tag: 'Agents',
      summary: 'Get an agent (inactive ones included)',
      auth: true,
      params: { path },
      responses: {
        200: { description: 'The agent.', body: AgentView },
        404: notFound('agent'),
      },
    },
    {
      method: 'patch',
      path: '/v1/agents/{id}',
      operationId: 'updateAgent',
      tag: 'Agents',
      summary: 'Update an agent',
      auth: true,
      params: { path },
      description:
        'Every mutable field, pricing included (null removes it); validated like create on the resulting agent. Setting upstream_url on a pending agent makes it active.',
      body: { schema: bodies.patch, id: 'AgentPatch', required: false },
      responses: {
        200: { description: 'The updated agent.', body: AgentView, headers: uncollectedWarning },
        400: err('Invalid body or combination.'),
        404: notFound('agent'),
        409: err('The new name is taken by an active or pending agent, or the agent is inactive.'),
      },
    },
    {
      method: 'delete',
      path: '/v1/agents/{id}',
      operationId: 'deleteAgent',
      tag: 'Agents',
      summary: 'Soft-delete an agent (status becomes inactive)',
      auth: true,
      description:
        'The agent stays readable: GET answers it with status inactive, and GET /v1/agents lists it with status=inactive. It is no longer invocable and every write to it is a 409.',
      params: { path },
      responses: {
        204: { description: 'Deleted (also when it already was).' },
        404: notFound('agent'),
      },
    },
    {
      method: 'post',
      path: '/v1/agents/{id}/suspend',
      operationId: 'suspendAgent',
      tag: 'Agents',
      summary: 'Suspend an agent (it stays listed and rejects invocations with 422)',
      auth: true,
      params: { path },
      body: { schema: AgentSuspendInput, required: false },
      responses: {
        200: { description: 'The suspended agent.', body: AgentView },
        400: err('Invalid body.'),
        404: notFound('agent'),
        409: err('The agent is inactive.'),
      },
    },
    {
      method: 'post',
      path: '/v1/agents/{id}/unsuspend',
      operationId: 'unsuspendAgent',
      tag: 'Agents',
      summary: 'Lift a suspension',
      auth: true,
      params: { path },
      body: { schema: AgentUnsuspendInput, required: false },
      responses: {
        200: { description: 'The agent.', body: AgentView },
        400: err('Invalid body.'),
        404: notFound('agent'),
        409: err('The agent is inactive.'),
      },
    },
  ];
}

const credentialOperations: Operation[] = [
  {
    method: 'post',
    path: '/v1/credentials',
    operationId: 'createCredential',
    tag: 'Credentials',
    summary: 'Store an upstream credential',
    auth: true,
    description:
      "source=managed stores `plaintext` envelope-encrypted (AES-256-GCM, per-version data key wrapped by the current key-encryption key); source=vault stores only `vault_ref`, which must name a secret under the tenant's own prefix (`secret/data/tenants/<tenant id>/` by default; anything else is a 400), read from Vault/OpenBao at call time.",
    body: { schema: CredentialCreateInput, required: true },
    responses: {
      201: { description: 'The stored credential (metadata only).', body: CredentialView },
      400: err('Invalid body.'),
      409: err('The name is taken in the tenant.'),
    },
  },
  {
    method: 'get',
    path: '/v1/credentials',
    operationId: 'listCredentials',
    tag: 'Credentials',
    summary: 'List credentials (metadata only)',
    auth: true,
    params: { query: CredentialListQuery },
    responses: {
      200: { description: 'A page of credentials.', body: CredentialList },
      400: err('Invalid limit or cursor; a parameter given twice.'),
    },
  },
  {
    method: 'get',
    path: '/v1/credentials/{id}',
    operationId: 'getCredential',
    tag: 'Credentials',
    summary: 'Get a credential (metadata only)',
    auth: true,
    params: { path: CredentialPath },
    responses: {
      200: { description: 'The credential.', body: CredentialView },
      404: notFound('credential'),
    },
  },
  {
    method: 'put',
    path: '/v1/credentials/{id}',
    operationId: 'updateCredential',
    tag: 'Credentials',
    summary: 'Update or rotate a credential',
    auth: true,
    params: { path: CredentialPath },
    description:
      'Absent keys leave values unchanged. A new plaintext is encrypted under the current key-encryption key with a fresh data key and increments version; so does a new vault_ref.',
    body: { schema: CredentialUpdateInput, required: false },
    responses: {
      200: { description: 'The updated credential.', body: CredentialView },
      400: err('Invalid body, empty name or plaintext, invalid auth_type, or a field of the other source.'),
      404: notFound('credential'),
      409: err('The new name conflicts with another credential in the tenant.'),
    },
  },
  {
    method: 'delete',
    path: '/v1/credentials/{id}',
    operationId: 'deleteCredential',
    tag: 'Credentials',
    summary: 'Delete a credential',
    auth: true,
    params: { path: CredentialPath },
    responses: {
      204: { description: 'Deleted.' },
      404: notFound('credential'),
      409: err("Still referenced by an agent's credential_ref or the tenant's facilitator_credential_ref."),
    },
  },
];

const MEMBER_RULES =
  'Each member names an MCP agent (protocol=mcp) of the tenant; prefixes (given or defaulted) are unique within the server; members is not empty. A broken rule is a 400 naming the member and field.';

const mcpServerOperations: Operation[] = [
  {
    method: 'post',
    path: '/v1/mcp-servers',
    operationId: 'createMcpServer',
    tag: 'MCP servers',
    summary: 'Create a virtual MCP server',
    auth: true,
    description: `One MCP endpoint (\`mcp_url\`, streamable HTTP) federating the tools, prompts and resources of its member MCP agents, each tool named \`{prefix}_{tool}\`. ${MEMBER_RULES}`,
    body: { schema: McpServerCreateInput, required: true },
    responses: {
      201: { description: 'The server.', body: McpServerView },
      400: err('Invalid body, or a member that breaks a rule.'),
      409: err('The name is taken in the tenant.'),
    },
  },
  {
    method: 'get',
    path: '/v1/mcp-servers',
    operationId: 'listMcpServers',
    tag: 'MCP servers',
    summary: 'List virtual MCP servers',
    auth: true,
    params: { query: McpServerListQuery },
    responses: {
      200: { description: 'A page of servers.', body: McpServerList },
      400: err('Invalid limit or cursor; a parameter given twice.'),
    },
  },
  {
    method: 'get',
    path: '/v1/mcp-servers/{id}',
    operationId: 'getMcpServer',
    tag: 'MCP servers',
    summary: 'Get a virtual MCP server',
    auth: true,
    params: { path: McpServerPath },
    responses: {
      200: { description: 'The server.', body: McpServerView },
      404: notFound('MCP server'),
    },
  },
  {
    method: 'patch',
    path: '/v1/mcp-servers/{id}',
    operationId: 'updateMcpServer',
    tag: 'MCP servers',
    summary: 'Update a virtual MCP server',
    auth: true,
    params: { path: McpServerPath },
    description: `Absent keys leave values unchanged; \`members\` replaces the list. ${MEMBER_RULES}`,
    body: { schema: McpServerUpdateInput, required: false },
    responses: {
      200: { description: 'The updated server.', body: McpServerView },
      400: err('Invalid body, or a member that breaks a rule.'),
      404: notFound('MCP server'),
      409: err('The new name is taken in the tenant.'),
    },
  },
  {
    method: 'delete',
    path: '/v1/mcp-servers/{id}',
    operationId: 'deleteMcpServer',
    tag: 'MCP servers',
    summary: 'Delete a virtual MCP server',
    auth: true,
    params: { path: McpServerPath },
    responses: {
      204: { description: 'Deleted; its sessions end.' },
      404: notFound('MCP server'),
    },
  },
  {
    method: 'post',
    path: '/v1/mcp-servers/{id}/mcp',
    operationId: 'mcpServerRequest',
    tag: 'MCP servers',
    summary: "A request to the server's MCP endpoint (streamable HTTP)",
    auth: true,
    description:
      'initialize opens a session (its `Mcp-Session-Id` in the answer); every later request carries it. Lists are federated, calls relayed to their member as its invocations (docs/API.md, "Virtual MCP servers").',
    params: { path: McpServerPath, header: McpSessionHeader },
    body: { schema: McpServerRpcInput, required: true },
    responses: {
      200: { description: 'The JSON-RPC response (JSON), or a relayed member answer (JSON or server-sent events).' },
      202: { description: 'A notification, accepted.' },
      400: { description: 'Not one JSON-RPC 2.0 request, or no session header after initialize (a JSON-RPC error).' },
      404: {
        description: 'No such server in the tenant (`{error}`), or an unknown or ended session (a JSON-RPC error).',
      },
    },
  },
  {
    method: 'get',
    path: '/v1/mcp-servers/{id}/mcp',
    operationId: 'mcpServerStream',
    tag: 'MCP servers',
    summary: "The session's stream of the server's own messages (server-sent events)",
    auth: true,
    description:
      'What the server tells the client unasked: `notifications/{tools,prompts,resources}/list_changed` when its membership, a member agent or the tenant\'s policy changes. One stream per session (a new one ends the one before), at most 64 per tenant on each replica, each ended after 10 minutes (the client opens it again) (docs/API.md, "Virtual MCP servers").',
    params: { path: McpServerPath, header: McpStreamSessionHeader },
    responses: {
      200: { description: 'The stream (`text/event-stream`), open until the session, the server or the stream ends.' },
      400: { description: 'No session header (a JSON-RPC error).' },
      404: {
        description: 'No such server in the tenant (`{error}`), or an unknown or ended session (a JSON-RPC error).',
      },
      406: { description: 'Accept does not include text/event-stream.' },
      429: { description: 'The tenant holds as many streams on this replica as it may.' },
      503: { description: 'The replica is stopping; the client opens its stream again (on another replica).' },
    },
  },
  {
    method: 'delete',
    path: '/v1/mcp-servers/{id}/mcp',
    operationId: 'mcpServerEndSession',
    tag: 'MCP servers',
    summary: 'End an MCP session and the member sessions it opened',
    auth: true,
    params: { path: McpServerPath, header: McpSessionHeader },
    responses: {
      204: { description: 'Ended.' },
      404: notFound('MCP server or session'),
    },
  },
];

const settlementOperations: Operation[] = [
  {
    method: 'get',
    path: '/v1/settlement/config',
    operationId: 'getSettlementConfig',
    tag: 'Settlement',
    summary: "The tenant's settlement configuration",
    auth: true,
    responses: {
      200: { description: 'The configuration.', body: SettlementConfigView },
      404: err('The tenant has not configured settlement.'),
    },
  },
  {
    method: 'put',
    path: '/v1/settlement/config',
    operationId: 'putSettlementConfig',
    tag: 'Settlement',
    summary: 'Create or replace the settlement configuration',
    auth: true,
    description:
      "facilitator_credential_ref must name a credential of the tenant whose secret holds a PEM client certificate and its private key. claim_every_seconds and claim_threshold say how the tenant's batch-settlement channels are claimed; absent, their defaults (300, none).",
    body: { schema: SettlementConfigInput, required: true },
    responses: {
      200: { description: 'Replaced.', body: SettlementConfigView },
      201: { description: 'Created.', body: SettlementConfigView },
      400: err(
        'Invalid body or URL (the message names the field: claim_every_seconds out of 10..86400, claim_threshold not a positive decimal amount); the credential is absent or holds no usable client certificate and key.',
      ),
    },
  },
  {
    method: 'delete',
    path: '/v1/settlement/config',
    operationId: 'deleteSettlementConfig',
    tag: 'Settlement',
    summary: 'Remove the settlement configuration',
    auth: true,
    responses: {
      204: { description: 'Removed.' },
      404: err('The tenant has not configured settlement.'),
    },
  },
];

const channelOperations: Operation[] = [
  {
    method: 'get',
    path: '/v1/channels',
    operationId: 'listChannels',
    tag: 'Settlement',
    summary: "The tenant's batch-settlement payment channels",
    auth: true,
    description:
      'Each channel the tenant was paid through: what was charged on it, the payer\'s latest voucher ceiling, the chain\'s state as last mirrored and its claims (docs/SETTLEMENT.md, "Channels: claims and settles"). In channel id order.',
    params: { query: ChannelListQuery },
    responses: {
      200: { description: 'A page of channels.', body: ChannelList },
      400: err('Invalid limit or cursor; a parameter given twice.'),
    },
  },
  {
    method: 'get',
    path: '/v1/channels/{id}',
    operationId: 'getChannel',
    tag: 'Settlement',
    summary: 'A batch-settlement payment channel',
    auth: true,
    params: { path: ChannelPath },
    responses: {
      200: { description: 'The channel.', body: ChannelView },
      404: notFound('channel'),
    },
  },
];

/** Agents (under the operator's rate ceiling), credentials and the settlement configuration. */
export function catalogOperations(ceiling: RateCeiling): Operation[] {
  return [
    ...agentOperations(ceiling),
    ...credentialOperations,
    ...mcpServerOperations,
    ...settlementOperations,
    ...channelOperations,
  ];
}
