// Every operation the API description lists, with the zod schemas of its bodies. Routes and
// this list are kept together by test/openapi.test.ts, which validates live answers against
// the generated document. A module that adds endpoints adds its operations here.
import type { z } from 'zod';
import { AgentCreateInput, AgentList, AgentPatchInput, AgentSuspendInput, AgentView } from '../agents/schema.ts';
import { CredentialCreateInput, CredentialList, CredentialUpdateInput, CredentialView } from '../credentials/schema.ts';
import { SettlementConfigInput, SettlementConfigView } from '../settlement/schema.ts';
import {
  AnalyticsResult,
  ErrorBody,
  Health,
  Invocation,
  InvocationAccepted,
  InvocationList,
  Jwks,
  PaymentChallenge,
  PolicyDecisionList,
  PolicyDocumentInput,
  PolicyVersion,
  PolicyView,
  Readiness,
  Receipt,
  Version,
} from './schemas.ts';

type Param = {
  name: string;
  in: 'path' | 'query' | 'header';
  required?: boolean;
  description?: string;
  schema: Record<string, unknown>;
};

export type ResponseSpec = {
  description: string;
  /** A registered (`.meta({ id })`) zod schema, or a raw media type with any content. */
  body?: z.ZodType | { mediaType: string };
  /** Alternative bodies (e.g. a 402 challenge or an error). */
  oneOf?: z.ZodType[];
  headers?: Record<string, string>;
};

export type Operation = {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  path: string;
  operationId: string;
  tag: string;
  summary: string;
  description?: string;
  /** Bearer token required (every /v1 resource); false for probes and this description. */
  auth: boolean;
  params?: Param[];
  body?: { schema: z.ZodType; required: boolean } | { mediaType: string; required: boolean };
  responses: Record<string, ResponseSpec>;
};

const err = (description: string): ResponseSpec => ({ description, body: ErrorBody });
const unauthorized: ResponseSpec = {
  description: 'Missing or invalid bearer token, or absent tenant/user claims. No body.',
};
const serverError: ResponseSpec = { description: 'Unexpected server error. No body.' };
const notFound = (what: string) => err(`No ${what} with that id in the caller's tenant.`);
/** Every management operation with a JSON body: the body parser's cap (docs/PROXY.md "Pathological JSON"). */
const bodyTooLarge = err('JSON body over 1 MiB.');
const slowBody = err('The body arrived too slowly (docs/PROXY.md "Slow uploads"); the connection is closed.');
const rateLimited = (what: string): ResponseSpec => ({
  description: what,
  body: ErrorBody,
  headers: { 'Retry-After': 'Seconds, at most 60.' },
});
const timeRange = (what: string): Param[] => [
  {
    name: 'since',
    in: 'query',
    schema: { type: 'string', format: 'date-time' },
    description: `${what} at or after this RFC 3339 instant. An unencoded \`+hh:mm\` offset (its \`+\` decoded as a space) is read as the \`+\` it was.`,
  },
  {
    name: 'until',
    in: 'query',
    schema: { type: 'string', format: 'date-time' },
    description: `${what} at or before this RFC 3339 instant (read like since).`,
  },
];

const agentId: Param = {
  name: 'id',
  in: 'path',
  required: true,
  schema: { type: 'string', pattern: '^agt_' },
  description: 'Agent id (`agt_<uuidv7>`).',
};
const credentialId: Param = {
  name: 'id',
  in: 'path',
  required: true,
  schema: { type: 'string', pattern: '^cred_' },
  description: 'Credential id (`cred_<uuidv7>`).',
};
const limit: Param = {
  name: 'limit',
  in: 'query',
  schema: { type: 'integer', minimum: 1, maximum: 100, default: 20 },
  description: 'Page size; clamped to [1, 100].',
};
const cursor: Param = {
  name: 'cursor',
  in: 'query',
  schema: { type: 'string' },
  description: '`next_cursor` of the previous page.',
};
// x402, in either dialect (docs/SETTLEMENT.md): v1 X-PAYMENT / X-PAYMENT-RESPONSE, v2
// PAYMENT-SIGNATURE / PAYMENT-RESPONSE; every payment 402 carries the v2 PAYMENT-REQUIRED.
const paymentParams: Param[] = [
  {
    name: 'X-PAYMENT',
    in: 'header',
    schema: { type: 'string' },
    description: 'Base64 x402 v1 payment; priced agents only. Not together with PAYMENT-SIGNATURE (402).',
  },
  {
    name: 'PAYMENT-SIGNATURE',
    in: 'header',
    schema: { type: 'string' },
    description:
      'Base64 x402 v2 PaymentPayload (network `eip155:8453`); priced agents only. Not together with X-PAYMENT (402).',
  },
];
const paymentReceipts = {
  'X-PAYMENT-RESPONSE':
    'Base64 JSON settlement receipt `{success, transaction, network, payer}` of a call paid with X-PAYMENT, once settled.',
  'PAYMENT-RESPONSE': 'Base64 x402 v2 SettleResponse of a call paid with PAYMENT-SIGNATURE, once settled.',
};
const paymentRequired = {
  'PAYMENT-REQUIRED': 'Base64 x402 v2 PaymentRequired: the challenge, its `error` saying why.',
};

/** On an answer that prices an agent in a tenant without settlement configured (an addition to the v1 contract). */
const uncollectedWarning = {
  'X-Gateway-Warning':
    'Present when the agent is priced and its tenant has no settlement configured: payments are verified but not collected.',
};

export const operations: Operation[] = [
  // Probes and this description.
  {
    method: 'get',
    path: '/healthz',
    operationId: 'liveness',
    tag: 'Service',
    summary: 'Liveness',
    auth: false,
    responses: { 200: { description: 'The process is up.', body: Health } },
  },
  {
    method: 'get',
    path: '/readyz',
    operationId: 'readiness',
    tag: 'Service',
    summary: 'Readiness (database reachable, start backlog with room)',
    auth: false,
    responses: { 200: { description: 'Ready.', body: Readiness }, 503: { description: 'Not ready.', body: Readiness } },
  },
  {
    method: 'get',
    path: '/version',
    operationId: 'version',
    tag: 'Service',
    summary: 'Build metadata',
    auth: false,
    responses: { 200: { description: 'Name, version and commit.', body: Version } },
  },
  {
    method: 'get',
    path: '/v1/openapi.json',
    operationId: 'openapi',
    tag: 'Service',
    summary: 'This OpenAPI 3.1 document',
    auth: false,
    responses: { 200: { description: 'The document.', body: { mediaType: 'application/json' } } },
  },
  {
    method: 'get',
    path: '/docs',
    operationId: 'reference',
    tag: 'Service',
    summary: 'Rendered API reference (HTML)',
    auth: false,
    responses: { 200: { description: 'The reference page.', body: { mediaType: 'text/html' } } },
  },

  // Agents.
  {
    method: 'post',
    path: '/v1/agents',
    operationId: 'createAgent',
    tag: 'Agents',
    summary: 'Create an agent',
    auth: true,
    description:
      'protocol defaults to http; protocol=mcp requires mcp_transport=streamable_http (rejected for http); pricing requires asset USDC and network base; pricing.tools requires mcp. Status is pending without upstream_url, else active.',
    body: { schema: AgentCreateInput, required: true },
    responses: {
      201: { description: 'The created agent.', body: AgentView, headers: uncollectedWarning },
      400: err(
        'Invalid body, missing name, invalid upstream_url, or an invalid protocol/pricing combination; credential_ref naming no credential of the tenant.',
      ),
      401: unauthorized,
      413: bodyTooLarge,
      409: err(
        'An active or pending agent with the same name exists in the tenant, or the tenant already has TENANT_MAX_AGENTS active or pending agents.',
      ),
      500: serverError,
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
    params: [
      { name: 'status', in: 'query', schema: { type: 'string', enum: ['pending', 'active', 'inactive'] } },
      { name: 'tag', in: 'query', schema: { type: 'string' }, description: 'Only agents carrying this tag.' },
      { name: 'protocol', in: 'query', schema: { type: 'string', enum: ['http', 'mcp'] } },
      limit,
      cursor,
    ],
    responses: {
      200: { description: 'A page of agents.', body: AgentList },
      400: err('Invalid filter, limit or cursor.'),
      401: unauthorized,
      500: serverError,
    },
  },
  {
    method: 'get',
    path: '/v1/agents/{id}',
    operationId: 'getAgent',
    tag: 'Agents',
    summary: 'Get an agent (inactive ones included)',
    auth: true,
    params: [agentId],
    responses: {
      200: { description: 'The agent.', body: AgentView },
      401: unauthorized,
      404: notFound('agent'),
      500: serverError,
    },
  },
  {
    method: 'patch',
    path: '/v1/agents/{id}',
    operationId: 'updateAgent',
    tag: 'Agents',
    summary: 'Update an agent',
    auth: true,
    params: [agentId],
    description:
      'Every mutable field, pricing included (null removes it); validated like create on the resulting agent. Setting upstream_url on a pending agent makes it active.',
    body: { schema: AgentPatchInput, required: true },
    responses: {
      200: { description: 'The updated agent.', body: AgentView, headers: uncollectedWarning },
      400: err('Invalid body or combination.'),
      401: unauthorized,
      413: bodyTooLarge,
      404: notFound('agent'),
      409: err('The new name is taken by an active or pending agent, or the agent is inactive.'),
      500: serverError,
    },
  },
  {
    method: 'delete',
    path: '/v1/agents/{id}',
    operationId: 'deleteAgent',
    tag: 'Agents',
    summary: 'Soft-delete an agent (status becomes inactive)',
    auth: true,
    params: [agentId],
    responses: {
      204: { description: 'Deleted (also when it already was).' },
      401: unauthorized,
      404: notFound('agent'),
      500: serverError,
    },
  },
  {
    method: 'post',
    path: '/v1/agents/{id}/suspend',
    operationId: 'suspendAgent',
    tag: 'Agents',
    summary: 'Suspend an agent (it stays listed and rejects invocations with 422)',
    auth: true,
    params: [agentId],
    body: { schema: AgentSuspendInput, required: false },
    responses: {
      200: { description: 'The suspended agent.', body: AgentView },
      400: err('Invalid body.'),
      401: unauthorized,
      413: bodyTooLarge,
      404: notFound('agent'),
      409: err('The agent is inactive.'),
      500: serverError,
    },
  },
  {
    method: 'post',
    path: '/v1/agents/{id}/unsuspend',
    operationId: 'unsuspendAgent',
    tag: 'Agents',
    summary: 'Lift a suspension',
    auth: true,
    params: [agentId],
    responses: {
      200: { description: 'The agent.', body: AgentView },
      400: err('Invalid body.'),
      401: unauthorized,
      413: bodyTooLarge,
      404: notFound('agent'),
      409: err('The agent is inactive.'),
      500: serverError,
    },
  },

  // Credentials.
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
      401: unauthorized,
      413: bodyTooLarge,
      409: err('The name is taken in the tenant.'),
      500: serverError,
    },
  },
  {
    method: 'get',
    path: '/v1/credentials',
    operationId: 'listCredentials',
    tag: 'Credentials',
    summary: 'List credentials (metadata only)',
    auth: true,
    params: [limit, cursor],
    responses: {
      200: { description: 'A page of credentials.', body: CredentialList },
      400: err('Invalid limit or cursor.'),
      401: unauthorized,
      500: serverError,
    },
  },
  {
    method: 'get',
    path: '/v1/credentials/{id}',
    operationId: 'getCredential',
    tag: 'Credentials',
    summary: 'Get a credential (metadata only)',
    auth: true,
    params: [credentialId],
    responses: {
      200: { description: 'The credential.', body: CredentialView },
      401: unauthorized,
      404: notFound('credential'),
      500: serverError,
    },
  },
  {
    method: 'put',
    path: '/v1/credentials/{id}',
    operationId: 'updateCredential',
    tag: 'Credentials',
    summary: 'Update or rotate a credential',
    auth: true,
    params: [credentialId],
    description:
      'Absent keys leave values unchanged. A new plaintext is encrypted under the current key-encryption key with a fresh data key and increments version; so does a new vault_ref.',
    body: { schema: CredentialUpdateInput, required: true },
    responses: {
      200: { description: 'The updated credential.', body: CredentialView },
      400: err('Invalid body, empty name or plaintext, invalid auth_type, or a field of the other source.'),
      401: unauthorized,
      413: bodyTooLarge,
      404: notFound('credential'),
      409: err('The new name conflicts with another credential in the tenant.'),
      500: serverError,
    },
  },
  {
    method: 'delete',
    path: '/v1/credentials/{id}',
    operationId: 'deleteCredential',
    tag: 'Credentials',
    summary: 'Delete a credential',
    auth: true,
    params: [credentialId],
    responses: {
      204: { description: 'Deleted.' },
      401: unauthorized,
      404: notFound('credential'),
      409: err("Still referenced by an agent's credential_ref or the tenant's facilitator_credential_ref."),
      500: serverError,
    },
  },

  // Settlement configuration.
  {
    method: 'get',
    path: '/v1/settlement/config',
    operationId: 'getSettlementConfig',
    tag: 'Settlement',
    summary: "The tenant's settlement configuration",
    auth: true,
    responses: {
      200: { description: 'The configuration.', body: SettlementConfigView },
      401: unauthorized,
      404: err('The tenant has not configured settlement.'),
      500: serverError,
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
      'facilitator_credential_ref must name a credential of the tenant whose secret holds a PEM client certificate and its private key.',
    body: { schema: SettlementConfigInput, required: true },
    responses: {
      200: { description: 'Replaced.', body: SettlementConfigView },
      201: { description: 'Created.', body: SettlementConfigView },
      400: err('Invalid body or URL; the credential is absent or holds no usable client certificate and key.'),
      401: unauthorized,
      413: bodyTooLarge,
      500: serverError,
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
      401: unauthorized,
      404: err('The tenant has not configured settlement.'),
      500: serverError,
    },
  },

  // Proxy (behaviour: docs/API.md "Invocations"; payment: docs/SETTLEMENT.md, both x402 dialects).
  {
    method: 'post',
    path: '/v1/proxy/{id}',
    operationId: 'invoke',
    tag: 'Proxy',
    summary: 'Invoke an agent (transactional)',
    auth: true,
    params: [
      agentId,
      ...paymentParams,
      { name: 'X-Gateway-Model', in: 'header', schema: { type: 'string', maxLength: 256 } },
      { name: 'X-Request-ID', in: 'header', schema: { type: 'string' } },
    ],
    body: { mediaType: '*/*', required: false },
    responses: {
      202: {
        description: 'Accepted; poll the invocation.',
        body: InvocationAccepted,
        headers: { 'X-Gateway-Invocation-ID': 'The invocation id.', ...paymentReceipts },
      },
      400: err('X-Gateway-Model longer than 256 bytes, or an unparseable MCP body.'),
      401: unauthorized,
      402: {
        description: 'Payment required (challenge) or payment failed (error).',
        oneOf: [PaymentChallenge, ErrorBody],
        headers: paymentRequired,
      },
      403: err('Denied by policy.'),
      404: notFound('agent'),
      408: slowBody,
      413: err('Body over 32 MiB.'),
      422: err('The agent is pending, inactive or suspended.'),
      429: rateLimited(
        "The agent's or the global rate limit, or too many of the tenant's request bodies in flight (Retry-After: 1).",
      ),
      500: serverError,
      502: err('The agent credential cannot be resolved.'),
      503: {
        description:
          'The start backlog is full (Temporal away for a while; nothing was written, a payment stays unbound; Retry-After: 1), too many request bodies in flight in this process, or the payment is still settling (retry with the same payment header).',
        body: ErrorBody,
        headers: { 'Retry-After': 'Seconds.' },
      },
    },
  },
  {
    method: 'post',
    path: '/v1/proxy/{id}/stream',
    operationId: 'invokeStream',
    tag: 'Proxy',
    summary: 'Invoke an agent (streaming)',
    auth: true,
    params: [
      agentId,
      ...paymentParams,
      { name: 'X-Gateway-Model', in: 'header', schema: { type: 'string', maxLength: 256 } },
      { name: 'X-Request-ID', in: 'header', schema: { type: 'string' } },
    ],
    body: { mediaType: '*/*', required: false },
    responses: {
      default: {
        description: "The upstream's own status, headers and body, streamed.",
        body: { mediaType: '*/*' },
        headers: { 'X-Gateway-Invocation-ID': 'The invocation id.', ...paymentReceipts },
      },
      400: err('X-Gateway-Model longer than 256 bytes, or an unparseable MCP body.'),
      401: unauthorized,
      402: {
        description: 'Payment required or failed.',
        oneOf: [PaymentChallenge, ErrorBody],
        headers: paymentRequired,
      },
      403: err('Denied by policy.'),
      404: notFound('agent'),
      408: slowBody,
      413: err("An MCP agent's JSON-RPC request over 32 MiB (a plain body is not capped)."),
      422: err('The agent is not invocable.'),
      429: rateLimited(
        "The agent's or the global rate limit, or (MCP) too many of the tenant's request bodies in flight (Retry-After: 1).",
      ),
      500: serverError,
      502: err('Upstream unreachable, its circuit open, or the agent credential cannot be resolved.'),
      503: {
        description:
          'The payment is still settling (retry with the same payment header), or (MCP) too many request bodies in flight in this process.',
        body: ErrorBody,
        headers: { 'Retry-After': 'Seconds.' },
      },
      504: err('Upstream timed out.'),
    },
  },
  {
    method: 'get',
    path: '/v1/proxy/{id}/invocations/{inv_id}',
    operationId: 'getInvocation',
    tag: 'Proxy',
    summary: 'Poll an invocation',
    auth: true,
    params: [agentId, { name: 'inv_id', in: 'path', required: true, schema: { type: 'string', pattern: '^inv_' } }],
    responses: {
      200: { description: 'The invocation.', body: Invocation },
      401: unauthorized,
      404: err('No such invocation of this agent in the tenant.'),
      500: serverError,
    },
  },

  // Invocation records and receipts.
  {
    method: 'get',
    path: '/v1/invocations',
    operationId: 'listInvocations',
    tag: 'Invocations',
    summary: "The tenant's invocation records, newest first",
    auth: true,
    params: [
      { name: 'agent_id', in: 'query', schema: { type: 'string', pattern: '^agt_' } },
      { name: 'status', in: 'query', schema: { type: 'string', enum: ['pending', 'running', 'succeeded', 'failed'] } },
      ...timeRange('Invocations created'),
      limit,
      cursor,
    ],
    responses: {
      200: { description: 'A page of invocations (bodies are never listed).', body: InvocationList },
      400: err('Invalid filter, limit or cursor; since after until.'),
      401: unauthorized,
      500: serverError,
    },
  },
  {
    method: 'get',
    path: '/v1/invocations/{inv_id}/receipt',
    operationId: 'getReceipt',
    tag: 'Invocations',
    summary: 'The signed trust receipt of an invocation',
    auth: true,
    params: [{ name: 'inv_id', in: 'path', required: true, schema: { type: 'string', pattern: '^inv_' } }],
    responses: {
      200: { description: 'The receipt (compact JWS).', body: Receipt },
      401: unauthorized,
      404: err('No receipt (yet) for this invocation in the tenant.'),
      500: serverError,
    },
  },
  {
    method: 'get',
    path: '/.well-known/jwks.json',
    operationId: 'receiptKeys',
    tag: 'Invocations',
    summary: 'Public keys that verify receipts',
    auth: false,
    responses: { 200: { description: 'A JWK set.', body: Jwks } },
  },

  // Policy.
  {
    method: 'put',
    path: '/v1/policy',
    operationId: 'putPolicy',
    tag: 'Policy',
    summary: 'Replace the policy document',
    auth: true,
    body: { schema: PolicyDocumentInput, required: true },
    responses: {
      200: { description: 'The new version.', body: PolicyVersion },
      400: err('Malformed document (never stored).'),
      401: unauthorized,
      413: bodyTooLarge,
      500: serverError,
    },
  },
  {
    method: 'get',
    path: '/v1/policy',
    operationId: 'getPolicy',
    tag: 'Policy',
    summary: 'The policy document with its version',
    auth: true,
    responses: {
      200: { description: 'The document.', body: PolicyView },
      401: unauthorized,
      404: err('The tenant has no policy.'),
      500: serverError,
    },
  },
  {
    method: 'delete',
    path: '/v1/policy',
    operationId: 'deletePolicy',
    tag: 'Policy',
    summary: 'Remove the policy document (back to no policy)',
    description:
      'An addition to the v1 contract. Calls then pass unchanged and no decision is recorded. The version count continues: the next PUT answers the version after the removal.',
    auth: true,
    responses: {
      204: { description: 'Removed.' },
      401: unauthorized,
      404: err('The tenant has no policy.'),
      500: serverError,
    },
  },
  {
    method: 'get',
    path: '/v1/policy/decisions',
    operationId: 'listPolicyDecisions',
    tag: 'Policy',
    summary: 'Recorded policy decisions, newest first',
    auth: true,
    description:
      '`limit` is clamped and never refused. `since`/`until` (an addition to the v1 contract) narrow the page to decisions made in that window.',
    params: [limit, ...timeRange('Decisions made')],
    responses: {
      200: { description: 'Decisions and the effective limit.', body: PolicyDecisionList },
      400: err('since or until is not an RFC 3339 date-time, or since is after until.'),
      401: unauthorized,
      500: serverError,
    },
  },

  // Analytics.
  {
    method: 'get',
    path: '/v1/analytics',
    operationId: 'analytics',
    tag: 'Analytics',
    summary: 'Invocation figures per agent and time bucket',
    auth: true,
    params: [
      { name: 'group_by', in: 'query', schema: { type: 'string', enum: ['agent_id'] } },
      { name: 'bucket', in: 'query', schema: { type: 'string', enum: ['hour', 'day'], default: 'hour' } },
      ...timeRange('Buckets of invocations created').map((p) =>
        p.name === 'since'
          ? { ...p, required: true }
          : { ...p, description: `${p.description} Default now; the window is at most 31 days.` },
      ),
    ],
    responses: {
      200: { description: 'Groups per agent and bucket.', body: AnalyticsResult },
      400: err(
        'Missing or invalid since/until, unsupported group_by or bucket, since after until, or a window over 31 days.',
      ),
      401: unauthorized,
      429: rateLimited('Per-caller analytics limit.'),
      500: serverError,
    },
  },
];
