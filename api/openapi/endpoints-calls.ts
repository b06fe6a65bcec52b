// The call operations (the proxy, invocation records and receipts, policy, analytics) and the
// service endpoints: the zod schemas each route parses with and the statuses it answers.
import { AnalyticsParams, AnalyticsResult, CallerAnalyticsParams, CallerAnalyticsResult } from '../analytics/params.ts';
import { InvocationList, InvocationListQuery, Receipt, ReceiptPath } from '../invocations/schema.ts';
import {
  DecisionsQuery,
  PolicyDecisionList,
  PolicyDocumentInput,
  PolicyVersion,
  PolicyView,
} from '../policy/schema.ts';
import { InvocationAccepted, InvocationPath, InvocationView, ProxyPath } from '../proxy/schema.ts';
import { callOperationsOf, retryLater } from './endpoints-invoke.ts';
import { ConsoleAssetPath, Health, Jwks, Readiness, Version } from './schemas.ts';
import { callLimited, err, rateLimited, type Operation } from './responses.ts';

const slowBody = err('The body arrived too slowly (docs/PROXY.md "Slow uploads"); the connection is closed.');
// x402, in either dialect (docs/SETTLEMENT.md): v1 X-PAYMENT / X-PAYMENT-RESPONSE, v2
// PAYMENT-SIGNATURE / PAYMENT-RESPONSE; every payment 402 carries the v2 PAYMENT-REQUIRED.
const paymentReceipts = {
  'X-PAYMENT-RESPONSE':
    'Base64 JSON settlement receipt `{success, transaction, network, payer}` of a call paid with X-PAYMENT, once settled.',
  'PAYMENT-RESPONSE': 'Base64 x402 v2 SettleResponse of a call paid with PAYMENT-SIGNATURE, once settled.',
};
const badCall = err(
  'X-Gateway-Model longer than 256 bytes, an unparseable MCP or A2A body, an A2A method the agent does not pass, or (transactional) a streaming A2A method.',
);
const noAgent = err('No such agent in the tenant, or (A2A) a task not seen through this agent.');

export const serviceOperations: Operation[] = [
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
  {
    method: 'get',
    path: '/console',
    operationId: 'console',
    tag: 'Service',
    summary: 'The web console (HTML; docs/CONSOLE.md)',
    description:
      'A page that reads /v1 in the browser with the bearer token its user pastes; it holds no tenant data. Strict Content-Security-Policy, revalidated on every load.',
    auth: false,
    responses: {
      200: { description: 'The console page.', body: { mediaType: 'text/html' } },
      503: err('The console is not built (npm run build writes it into CONSOLE_DIR).'),
    },
  },
  {
    method: 'get',
    path: '/console/assets/{file}',
    operationId: 'consoleAsset',
    tag: 'Service',
    summary: "One of the console's content-hashed scripts and stylesheets (cached for a year)",
    auth: false,
    params: { path: ConsoleAssetPath },
    responses: {
      200: { description: 'The script (text/javascript) or stylesheet (text/css).', body: { mediaType: 'text/*' } },
      404: err('No asset of that name in the console build.'),
      503: err('The console is not built (npm run build writes it into CONSOLE_DIR).'),
    },
  },
];

export const callOperations: Operation[] = [
  // Proxy (behaviour: docs/API.md "Invocations"; payment: docs/SETTLEMENT.md, both x402 dialects).
  ...callOperationsOf({
    path: '/v1/proxy/{id}',
    tag: 'Proxy',
    auth: true,
    answerHeaders: { 'X-Gateway-Invocation-ID': 'The invocation id.', ...paymentReceipts },
    challengeHeader: 'Base64 x402 v2 PaymentRequired: the challenge, its `error` saying why.',
    transactional: {
      operationId: 'invoke',
      summary: 'Invoke an agent (transactional)',
      accepted: { description: 'Accepted; poll the invocation.', body: InvocationAccepted },
      paymentRequired: 'Payment required (challenge) or payment failed (error).',
      failures: {
        400: badCall,
        403: err('Denied by policy.'),
        404: noAgent,
        408: slowBody,
        413: err('Body over 32 MiB.'),
        422: err('The agent is pending, inactive or suspended.'),
        429: callLimited(
          "The agent's or the global rate limit, or too many of the tenant's request bodies in flight (Retry-After: 1).",
        ),
        502: err(
          'A priced call refused before payment: the agent credential cannot be resolved, or the upstream address is one the SSRF guard refuses.',
        ),
        503: retryLater(
          "The start backlog is full (Temporal away for a while; nothing was written, a payment stays unbound; Retry-After: 1), too many request bodies in flight in this process, the payment is still settling (retry with the same payment header), or a priced call's upstream circuit is open (`upstream unavailable`, refused before payment; Retry-After: seconds until it may half-open, 1 to 60).",
        ),
      },
    },
    streaming: {
      operationId: 'invokeStream',
      summary: 'Invoke an agent (streaming)',
      paymentRequired: 'Payment required or failed.',
      failures: {
        400: badCall,
        403: err('Denied by policy.'),
        404: noAgent,
        408: slowBody,
        413: err("An MCP agent's JSON-RPC request over 32 MiB (a plain body is not capped)."),
        422: err('The agent is not invocable.'),
        429: callLimited(
          "The agent's or the global rate limit, or (MCP) too many of the tenant's request bodies in flight (Retry-After: 1).",
        ),
        502: err('Upstream unreachable, its circuit open, or the agent credential cannot be resolved.'),
        503: retryLater(
          "The payment is still settling (retry with the same payment header; also when a paid call settled but could not be forwarded, its payment released), (MCP) too many request bodies in flight in this process, or a priced call's upstream circuit is open (`upstream unavailable`, refused before payment; Retry-After: seconds until it may half-open, 1 to 60).",
        ),
        504: err('Upstream timed out.'),
      },
    },
  }),
  {
    method: 'get',
    path: '/v1/proxy/{id}/.well-known/agent-card.json',
    operationId: 'getA2aAgentCard',
    tag: 'Proxy',
    summary: "An A2A agent's card, pointing at the gateway",
    auth: true,
    params: { path: ProxyPath },
    responses: {
      200: {
        description:
          "The upstream's Agent Card as last read, its interfaces at the gateway's JSON-RPC endpoint for the agent (`/v1/proxy/{id}/stream`), the gateway's bearer scheme in place of the upstream's; no upstream address or credential.",
        body: { mediaType: 'application/json' },
      },
      404: err('No such agent in the tenant, not an A2A agent, or no card read yet (no upstream_url).'),
    },
  },
  {
    method: 'get',
    path: '/v1/proxy/{id}/invocations/{inv_id}',
    operationId: 'getInvocation',
    tag: 'Proxy',
    summary: 'Poll an invocation',
    auth: true,
    params: { path: InvocationPath },
    responses: {
      200: { description: 'The invocation.', body: InvocationView },
      404: err('No such invocation of this agent in the tenant.'),
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
    params: { query: InvocationListQuery },
    responses: {
      200: { description: 'A page of invocations (bodies are never listed).', body: InvocationList },
      400: err('Invalid filter, limit or cursor; since after until.'),
    },
  },
  {
    method: 'get',
    path: '/v1/invocations/{inv_id}/receipt',
    operationId: 'getReceipt',
    tag: 'Invocations',
    summary: 'The signed trust receipt of an invocation',
    auth: true,
    params: { path: ReceiptPath },
    responses: {
      200: { description: 'The receipt (compact JWS).', body: Receipt },
      404: err('No receipt (yet) for this invocation in the tenant.'),
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
      404: err('The tenant has no policy.'),
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
      404: err('The tenant has no policy.'),
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
    params: { query: DecisionsQuery },
    responses: {
      200: { description: 'Decisions and the effective limit.', body: PolicyDecisionList },
      400: err('since or until is not an RFC 3339 date-time, or since is after until.'),
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
    params: { query: AnalyticsParams },
    responses: {
      200: { description: 'Groups per agent and bucket.', body: AnalyticsResult },
      400: err(
        'Missing or invalid since/until, unsupported group_by or bucket, since after until, or a window over 31 days.',
      ),
      429: rateLimited('Per-caller analytics limit.'),
    },
  },
  {
    method: 'get',
    path: '/v1/analytics/callers',
    operationId: 'analyticsByCaller',
    tag: 'Analytics',
    summary: "Invocation counts per caller (a token's user or a public agent's payer), agent and time bucket",
    auth: true,
    params: { query: CallerAnalyticsParams },
    responses: {
      200: { description: 'Groups per caller, agent and bucket (at most 1000).', body: CallerAnalyticsResult },
      400: err(
        'Missing or invalid since/until, unsupported bucket or caller_kind, since after until, or a window over 31 days.',
      ),
      429: rateLimited('Per-caller analytics limit (shared with GET /v1/analytics).'),
    },
  },
];
