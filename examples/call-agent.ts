// Creates an agent and calls it both ways the gateway offers, with nothing but fetch:
// transactionally (POST /v1/proxy/{id} answers 202 with an invocation id at once; a Temporal
// workflow makes the upstream call and the invocation is polled until it is done) and streaming
// (POST /v1/proxy/{id}/stream answers with the upstream's own status, headers and body as they
// come). The agent keeps its calls' bodies (`capture_body`), so the poll shows the answer.
// Settings: GATEWAY_URL and TOKEN (examples/settings.ts), and
//   UPSTREAM_URL  the agent's upstream (default http://127.0.0.1:8099/, npm start's echo agent)
//   BODY          what is sent to the agent (default "hello")
// Run against `npm start`:
//   npm run example:call-agent
import { randomUUID } from 'node:crypto';
import { api, fail, finished, gatewaySettings, usage } from './settings.ts';

usage(`usage: npm run example:call-agent
  Creates an agent on UPSTREAM_URL (default npm start's echo agent) and calls it transactionally
  and streaming, printing both answers. Settings: GATEWAY_URL, TOKEN, UPSTREAM_URL, BODY
  (examples/call-agent.ts).`);
const s = gatewaySettings();
const body = process.env.BODY ?? 'hello';
const agent = await api<{ id: string; name: string }>(s, 'POST', '/v1/agents', 201, {
  name: `example-${randomUUID()}`,
  upstream_url: process.env.UPSTREAM_URL ?? 'http://127.0.0.1:8099/',
  capture_body: true,
});
console.log(`agent ${agent.id} created (${agent.name})`);

/** One call to the agent: its body sent as plain text with the bearer token. */
function invoke(path: string): Promise<Response> {
  return fetch(`${s.gateway}/v1/proxy/${agent.id}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${s.token}`, 'content-type': 'text/plain' },
    body,
  });
}

// Transactional: accepted at once, then polled.
const accepted = await invoke('');
if (accepted.status !== 202) fail(`POST /v1/proxy/${agent.id} answered ${accepted.status}: ${await accepted.text()}`);
const { invocation_id } = (await accepted.json()) as { invocation_id: string };
const done = await finished({ ...s, agentId: agent.id }, invocation_id);
const captured = done.response_body_b64 ? Buffer.from(done.response_body_b64, 'base64').toString('utf8') : '';
console.log(`transactional: invocation ${invocation_id} ${done.status}, upstream status ${done.upstream_status}`);
console.log(`transactional answer: ${captured}`);

// Streaming: the upstream's answer as it comes, the invocation id in the head.
const streamed = await invoke('/stream');
const answer = await streamed.text();
const streamedId = streamed.headers.get('x-gateway-invocation-id');
if (!streamedId) fail(`POST /v1/proxy/${agent.id}/stream answered ${streamed.status}: ${answer}`);
console.log(`streaming: invocation ${streamedId}, status ${streamed.status}`);
console.log(`streaming answer: ${answer}`);
if (done.status !== 'succeeded' || !streamed.ok) process.exit(1);
