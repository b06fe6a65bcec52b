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
import { InvocationView, ProxyPath } from '../proxy/schema.ts';
import { idParam } from '../validation.ts';
import { callOperationsOf, paymentChallenge, retryLater } from './endpoints-invoke.ts';
import { err, rateLimited, serverError, type Operation, type ResponseSpec } from './responses.ts';

const PublicInvocationAccepted = z
  .strictObject({
    invocation_id: z.string().regex(/^inv_/),
    poll_url: z
      .string()
      .meta({ description: 'Where the payer, and only the payer, polls the call (its key is the capability).' }),
  })
  .meta({ id: 'PublicInvocationAccepted' });

const PublicPollPath = z.object({ invId: idParam('inv', 'Invocation') });
const PublicPollQuery = z.object({
  key: z.string().optional().meta({ description: 'The key of the poll_url the 202 handed out; without it, 404.' }),
});

const closed = err('No open public agent with that id (absent, not public, pending, suspended or deleted).');
const limited = rateLimited("Too many requests from this client address, or to this tenant's public agents.");
const receipts = {
  'X-PAYMENT-RESPONSE': 'Base64 settlement receipt of a call paid with X-PAYMENT.',
  'PAYMENT-RESPONSE': 'Base64 x402 v2 SettleResponse of a call paid with PAYMENT-SIGNATURE or in `_meta`.',
};
const challengeHeader = 'Base64 x402 v2 PaymentRequired, declaring the bazaar and payment-identifier extensions.';
const paymentRequired =
  'Payment required (the challenge: x402 v1 in the body, v2 in PAYMENT-REQUIRED, with the bazaar extension) or payment failed.';
const callFailures: Record<string, ResponseSpec> = {
  400: err('X-Gateway-Model longer than 256 bytes, or an unparseable MCP body.'),
  403: err('Denied by policy, or a free MCP tool (every public call is paid).'),
  404: closed,
  408: err('The body arrived too slowly; the connection is closed.'),
  413: err('Body over 32 MiB (transactional, or an MCP request).'),
  429: limited,
  500: serverError,
  502: err('Upstream unreachable or refused by the SSRF guard, or its credential cannot be resolved.'),
  503: retryLater('Backlog full, payment still settling, or upstream circuit open.'),
  504: err('Upstream timed out.'),
};

const [invokePublic, invokePublicStream] = callOperationsOf({
  path: '/public/agents/{id}',
  tag: 'Public agents',
  auth: false,
  answerHeaders: receipts,
  challengeHeader,
  transactional: {
    operationId: 'invokePublic',
    summary: 'Call a public agent, paid with x402 (transactional)',
    accepted: { description: 'Accepted; the payer polls poll_url.', body: PublicInvocationAccepted },
    paymentRequired,
    failures: callFailures,
  },
  streaming: {
    operationId: 'invokePublicStream',
    summary: 'Call a public agent, paid with x402 (streaming; where MCP clients connect)',
    description:
      'An MCP `tools/call` without payment is answered as the x402 MCP transport says: HTTP 200, a JSON-RPC result with `isError: true` and the PaymentRequired in `structuredContent`; it is paid in `params._meta["x402/payment"]`.',
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
