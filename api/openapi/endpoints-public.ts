// The public surface (docs/API.md "Selling an agent to any x402 client"): a public agent's URLs,
// the payer's poll, and the discovery catalog. No token: each operation is anonymous, limited per
// client address (429), and answers 404 for an agent that is not open.
import { z } from 'zod';
import {
  DiscoveryListQuery,
  DiscoveryResourcesResponse,
  DiscoverySearchQuery,
  DiscoverySearchResponse,
} from '../discovery/schema.ts';
import { InvocationView, ProxyHeaders, ProxyPath } from '../proxy/schema.ts';
import { idParam } from '../validation.ts';
import { callOperationsOf, paymentChallenge, retryLater } from './endpoints-invoke.ts';
import { callLimited, err, rateLimited, serverError, type Operation, type ResponseSpec } from './responses.ts';
import { A2A_X402_EXTENSION } from '../../gateway/a2a/x402.ts';

const PublicInvocationAccepted = z
  .strictObject({
    invocation_id: z.string().regex(/^inv_/),
    poll_url: z
      .string()
      .meta({ description: 'Where the payer, and only the payer, polls the call (its key is the capability).' }),
  })
  .meta({ id: 'PublicInvocationAccepted' });

/** A public call's headers: the /v1 ones, and the A2A extension activation (the x402 A2A transport). */
const PublicProxyHeaders = ProxyHeaders.extend({
  'X-A2A-Extensions': z
    .string()
    .optional()
    .meta({
      description: `Comma-separated A2A extension URIs (A2A 0.3; \`A2A-Extensions\` in 1.0). Listing ${A2A_X402_EXTENSION} activates the x402 A2A transport for an A2A message: paid in \`x402.payment.payload\` of its metadata, told to pay with an input-required task (200).`,
    }),
});

const a2aAnswer: ResponseSpec = {
  description:
    'An A2A message sent with the x402 A2A extension activated: a JSON-RPC result, an `input-required` task whose status message metadata carries `x402.payment.status: payment-required` and `x402.payment.required` (the v2 PaymentRequired), or a `failed` task with `payment-failed`, `x402.payment.error` and a failed receipt when the payment was refused (the message did not run).',
  body: { mediaType: 'application/json' },
  headers: { 'X-A2A-Extensions': 'The activated extension, echoed.' },
};

const PublicPollPath = z.object({ invId: idParam('inv', 'Invocation') });
const PublicPollQuery = z.object({
  key: z.string().optional().meta({ description: 'The key of the poll_url the 202 handed out; without it, 404.' }),
});

const closed = err('No open public agent with that id (absent, not public, pending, suspended or deleted).');
const limited = rateLimited("Too many requests from this client address, or to this tenant's public agents.");
const receipts = {
  'X-PAYMENT-RESPONSE': 'Base64 settlement receipt of a call paid with X-PAYMENT.',
  'PAYMENT-RESPONSE':
    'Base64 x402 v2 SettleResponse of a call paid with PAYMENT-SIGNATURE, in `_meta` or in A2A message metadata.',
};
const challengeHeader = 'Base64 x402 v2 PaymentRequired, declaring the bazaar and payment-identifier extensions.';
const paymentRequired =
  'Payment required (the challenge: x402 v1 in the body, v2 in PAYMENT-REQUIRED, with the bazaar extension) or payment failed.';
const callFailures: Record<string, ResponseSpec> = {
  400: err('X-Gateway-Model longer than 256 bytes, or an unparseable MCP or A2A body.'),
  403: err('Denied by policy, or a free MCP tool (every public call is paid).'),
  404: err(
    'No open public agent with that id, an A2A task not bound to this payer, or (x402 A2A transport) a payment task not issued by this agent, expired or used.',
  ),
  408: err('The body arrived too slowly; the connection is closed.'),
  413: err(
    'Body over 32 MiB (transactional, or an MCP request), or an A2A message over 64 KiB sent with the x402 A2A extension or carrying x402.payment keys.',
  ),
  429: callLimited("Too many requests from this client address, or to this tenant's public agents."),
  500: serverError,
  502: err('Upstream unreachable or refused by the SSRF guard, or its credential cannot be resolved.'),
  503: retryLater('Backlog full, payment still settling, or upstream circuit open.'),
  504: err('Upstream timed out.'),
};

const [invokePublic, invokePublicStream] = callOperationsOf({
  path: '/public/agents/{id}',
  tag: 'Public agents',
  auth: false,
  headers: PublicProxyHeaders,
  answerHeaders: receipts,
  challengeHeader,
  transactional: {
    operationId: 'invokePublic',
    summary: 'Call a public agent, paid with x402 (transactional)',
    accepted: { description: 'Accepted; the payer polls poll_url.', body: PublicInvocationAccepted },
    paymentRequired,
    failures: callFailures,
    answers: { 200: a2aAnswer },
  },
  streaming: {
    operationId: 'invokePublicStream',
    summary: 'Call a public agent, paid with x402 (streaming; where MCP clients connect)',
    description:
      'An MCP `tools/call` without payment is answered as the x402 MCP transport says: HTTP 200, a JSON-RPC result with `isError: true` and the PaymentRequired in `structuredContent`; it is paid in `params._meta["x402/payment"]`. An A2A message sent with the x402 A2A extension activated (`X-A2A-Extensions`) is answered as that transport says: HTTP 200, an `input-required` task carrying the PaymentRequired (one SSE event for a streaming method); it is paid in `x402.payment.payload` of the message metadata, and the answer carries `x402.payment.receipts`.',
    paymentRequired,
    failures: callFailures,
  },
});

export const publicOperations: Operation[] = [
  invokePublic,
  {
    method: 'get',
    path: '/public/agents/{id}',
    operationId: 'describePublic',
    tag: 'Public agents',
    summary: "A public agent's page (Accept: text/html) or its challenge",
    auth: false,
    params: { path: ProxyPath },
    responses: {
      200: {
        description: 'The static page: name, public description, price, how to pay.',
        body: { mediaType: 'text/html' },
      },
      402: paymentChallenge(paymentRequired, challengeHeader),
      404: closed,
      429: limited,
      500: serverError,
    },
  },
  invokePublicStream,
  {
    method: 'get',
    path: '/public/agents/{id}/.well-known/agent-card.json',
    operationId: 'getPublicA2aAgentCard',
    tag: 'Public agents',
    summary: "A public A2A agent's card",
    auth: false,
    params: { path: ProxyPath },
    responses: {
      200: {
        description: `The upstream's Agent Card as last read, its interfaces at the public streaming URL, no security scheme (no token: paid per call), \`capabilities.extensions\` declaring the x402 A2A extension (${A2A_X402_EXTENSION}, not required: HTTP 402 stays accepted); no upstream address or credential.`,
        body: { mediaType: 'application/json' },
      },
      404: err('No open public agent with that id, not an A2A agent, or no card read yet.'),
      429: limited,
      500: serverError,
    },
  },
  {
    method: 'get',
    path: '/public/invocations/{invId}',
    operationId: 'pollPublic',
    tag: 'Public agents',
    summary: "The payer's poll of a public transactional call",
    auth: false,
    params: { path: PublicPollPath, query: PublicPollQuery },
    responses: {
      200: { description: 'The invocation.', body: InvocationView },
      404: err('No such invocation, or not this key.'),
      429: limited,
      500: serverError,
    },
  },
  {
    method: 'get',
    path: '/discovery/resources',
    operationId: 'listDiscoveryResources',
    tag: 'Discovery',
    summary: 'The public agents, as x402 Bazaar resources',
    description: 'Readable by @x402/extensions `withBazaar(...).extensions.bazaar.listResources`. Oldest agent first.',
    auth: false,
    params: { query: DiscoveryListQuery },
    responses: {
      200: { description: 'A page of resources.', body: DiscoveryResourcesResponse },
      400: err('Invalid filter, limit or offset; a parameter given twice.'),
      429: rateLimited('Too many requests from this client address, or in total.'),
      500: serverError,
    },
  },
  {
    method: 'get',
    path: '/discovery/search',
    operationId: 'searchDiscoveryResources',
    tag: 'Discovery',
    summary: 'Search the public agents',
    description: 'Readable by @x402/extensions `withBazaar(...).extensions.bazaar.search`.',
    auth: false,
    params: { query: DiscoverySearchQuery },
    responses: {
      200: { description: 'A page of matching resources.', body: DiscoverySearchResponse },
      400: err('Missing or invalid query, invalid filter, limit or cursor; a parameter given twice.'),
      429: rateLimited('Too many requests from this client address, or in total.'),
      500: serverError,
    },
  },
];
