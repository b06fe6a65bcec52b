// Caps an agent's calls with a budget and watches it refuse: creates an agent, a hard budget of
// CALLS calls a day scoped to it (docs/API.md "Budgets"), calls it one time more than that
// (streaming), and prints each answer: the last is the budget's 429 naming it, with Retry-After
// until the day ends (UTC), refused before the upstream was called. Then it prints the budget's
// current window (used, remaining, resets_at). With WEBHOOK_URL the budget also alerts at 50%
// and 100% of its limit, and the tenant's alert secret is printed when this budget made it.
// Settings: GATEWAY_URL and TOKEN (examples/settings.ts), and
//   UPSTREAM_URL  the agent's upstream (default http://127.0.0.1:8099/, npm start's echo agent)
//   CALLS         the budget's daily calls (default 3)
//   WEBHOOK_URL   where alerts are POSTed (optional; http(s), held to the SSRF rules of upstreams)
// Run against `npm start`:
//   npm run example:budget
import { randomUUID } from 'node:crypto';
import { api, fail, gatewaySettings, usage } from './settings.ts';

usage(`usage: npm run example:budget
  Creates an agent on UPSTREAM_URL (default npm start's echo agent) and a hard budget of CALLS
  (default 3) calls a day on it, calls it CALLS + 1 times and prints each answer (the last a 429
  "budget exceeded" naming the budget), then the budget's window. Settings: GATEWAY_URL, TOKEN,
  UPSTREAM_URL, CALLS, WEBHOOK_URL (examples/budget.ts).`);
const s = gatewaySettings();
const calls = Number(process.env.CALLS ?? '3');
if (!Number.isInteger(calls) || calls < 1) fail('CALLS must be a whole number of at least 1', 2);

type Budget = {
  id: string;
  used: { amount: string; calls: number };
  remaining: { amount: string | null; calls: number | null };
  window_start: string;
  resets_at: string | null;
  alert_secret?: string;
};

const agent = await api<{ id: string }>(s, 'POST', '/v1/agents', 201, {
  name: `example-budget-${randomUUID()}`,
  upstream_url: process.env.UPSTREAM_URL ?? 'http://127.0.0.1:8099/',
});
console.log(`agent ${agent.id} created`);
const webhook = process.env.WEBHOOK_URL;
const budget = await api<Budget>(s, 'POST', '/v1/budgets', 201, {
  name: `example-budget-${randomUUID()}`,
  scope: { agent_id: agent.id },
  limit: { calls },
  window: 'day',
  mode: 'hard',
  ...(webhook ? { alerts: { thresholds: [0.5, 1], webhook_url: webhook } } : {}),
});
console.log(`budget ${budget.id} created: ${calls} calls a day, hard`);
if (budget.alert_secret)
  console.log(`alert secret (shown once; verify X-Gateway-Signature with it): ${budget.alert_secret}`);

let refused = false;
for (let i = 1; i <= calls + 1; i++) {
  const res = await fetch(`${s.gateway}/v1/proxy/${agent.id}/stream`, {
    method: 'POST',
    headers: { authorization: `Bearer ${s.token}`, 'content-type': 'text/plain' },
    body: `call ${i}`,
  });
  const text = await res.text();
  if (res.status === 429) {
    const answer = JSON.parse(text) as { error: string; budget_id?: string };
    console.log(
      `call ${i}: 429 ${answer.error} (budget ${answer.budget_id}), Retry-After ${res.headers.get('retry-after')} s`,
    );
    refused = answer.budget_id === budget.id;
  } else console.log(`call ${i}: ${res.status} ${text}`);
}

const shown = await api<Budget>(s, 'GET', `/v1/budgets/${budget.id}`, 200);
console.log(
  `window from ${shown.window_start}: used ${shown.used.calls} calls, ${shown.remaining.calls} remaining, resets at ${shown.resets_at}`,
);
if (!refused) fail(`the call past the budget was not refused by budget ${budget.id}`);
