// Pays a priced agent with x402-fetch, the x402 v1 client, on the transactional endpoint:
// x402-fetch sends the call, reads the 402 challenge (the agent's price), signs an EIP-3009
// authorization for it with the payer's key and sends the call again with X-PAYMENT. The
// gateway verifies the payment, settles it through the facilitator (when the tenant has
// settlement configured) and answers 202 with the invocation id, which is polled here until the
// call completes. Settings: examples/settings.ts. Run against `npm start`:
//   npm run example:x402-fetch -- agt_…
import { createSigner, wrapFetchWithPayment } from 'x402-fetch';
import { fail, report, settings, usage } from './settings.ts';

usage(`usage: npm run example:x402-fetch -- AGENT_ID
  Pays a priced agent with x402-fetch (x402 v1) on the transactional endpoint and prints the
  invocation, the payment and the answer. Settings: examples/settings.ts.`);
const s = settings();
const pay = wrapFetchWithPayment(fetch, await createSigner('base', s.payerKey), s.maxPayment);
const url = `${s.gateway}/v1/proxy/${s.agentId}`;
const res = await pay(url, {
  method: 'POST',
  headers: { Authorization: `Bearer ${s.token}`, 'Content-Type': 'text/plain' },
  body: s.body,
});
if (res.status !== 202) fail(`POST ${url} answered ${res.status}: ${await res.text()}`);
const { invocation_id } = (await res.json()) as { invocation_id: string };
console.log(`accepted: invocation ${invocation_id}`);

await report(s, invocation_id);
