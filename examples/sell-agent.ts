// Sells a priced agent to any x402 client (docs/API.md "Selling an agent to any x402 client"):
// the tenant makes the agent public with a description of how to call it; a buyer with no
// account finds it in the gateway's discovery catalog with @x402/extensions' Bazaar client, as
// it would at any x402 facilitator, and pays it with @x402/fetch and @x402/evm, unmodified, with
// no token. The tenant's settlement must be configured (docs/API.md "x402 payments", steps 1
// and 2). Settings: examples/settings.ts, and
//   PUBLIC_DESCRIPTION  what any caller is told the agent does (default "Echoes what you send")
// Run against `npm start`:
//   npm run example:sell-agent -- agt_…
import { x402Client } from '@x402/core/client';
import { HTTPFacilitatorClient, decodePaymentResponseHeader } from '@x402/core/http';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { withBazaar } from '@x402/extensions/bazaar';
import { wrapFetchWithPayment } from '@x402/fetch';
import { privateKeyToAccount } from 'viem/accounts';
import { api, fail, report, settings, usage } from './settings.ts';

usage(`usage: npm run example:sell-agent -- AGENT_ID
  Makes a priced agent public, finds it in the gateway's discovery catalog with the x402 Bazaar
  client and pays it with @x402/fetch, no token. Settings: examples/settings.ts.`);
const s = settings();

// 1. The tenant opens the agent, saying what a caller sends and gets back.
const description = process.env.PUBLIC_DESCRIPTION ?? 'Echoes what you send';
const agent = await api<{ public_url: string; public_stream_url: string; pricing: { pay_to: string } }>(
  s,
  'PATCH',
  `/v1/agents/${s.agentId}`,
  200,
  {
    public: true,
    public_description: description,
    public_interface: { input_example: { text: 'hello' }, output_example: { echo: 'hello' } },
  },
);
console.log(`agent ${s.agentId} is public at ${agent.public_url} and ${agent.public_stream_url}`);

// 2. A buyer finds it: the gateway's base URL is a Bazaar catalog like a facilitator's.
const bazaar = withBazaar(new HTTPFacilitatorClient({ url: s.gateway })).extensions.bazaar;
let offer;
for (let cursor: string | undefined, pages = 0; !offer && pages < 50; pages++) {
  const found = await bazaar.search({ query: description, limit: 100, cursor });
  offer = found.resources.find((r) => r.resource === agent.public_stream_url);
  cursor = found.pagination?.cursor ?? undefined;
  if (!cursor) break;
}
if (!offer) fail(`the catalog does not list ${agent.public_stream_url}`);
const terms = offer.accepts[0];
console.log(
  `found in the catalog: ${offer.resource}, ${terms.amount} USDC units to ${terms.payTo} on ${terms.network}`,
);

// 3. It pays with an unmodified x402 v2 client: no Authorization header, no account.
const client = new x402Client().register('eip155:*', new ExactEvmScheme(privateKeyToAccount(s.payerKey)));
client.setSpendControls({
  allowedAssets: [{ network: 'eip155:8453', asset: s.tokenAddress, maxAmountPerPayment: s.maxPayment.toString() }],
});
const res = await wrapFetchWithPayment(fetch, client)(offer.resource, {
  method: 'POST',
  headers: { 'Content-Type': 'text/plain' },
  body: s.body,
});
const answer = await res.text();
const invocationId = res.headers.get('x-gateway-invocation-id');
if (!invocationId) fail(`POST ${offer.resource} answered ${res.status}: ${answer}`);
const header = res.headers.get('payment-response');
if (header) console.log(`PAYMENT-RESPONSE: transaction ${decodePaymentResponseHeader(header).transaction}`);
// What the tenant sees of the call (read with its token).
await report(s, invocationId, answer);
