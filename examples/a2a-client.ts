// Talks to an A2A agent through the gateway with @a2a-js/sdk's own client, unmodified: the client
// is given the agent's URL at the gateway (`{GATEWAY_URL}/v1/proxy/{id}/`), reads the agent card
// the gateway serves there (its interface is the gateway's JSON-RPC endpoint for the agent, its
// scheme the gateway's bearer token) and sends a message, then reads the task back, with the
// token as its one extra header. The upstream never sees the token; each call is an invocation
// recorded with its A2A method and task. The agent is an A2A server (`"protocol": "a2a"`).
// Settings: GATEWAY_URL and TOKEN (examples/settings.ts), and
//   AGENT_ID   the A2A agent, or the first argument
//   TEXT       the message's text (default "hello")
//   SKILL      a skill to name in the message's metadata (`skill`; default none)
// Run against `npm start`, with an A2A agent of the token's tenant (npm start's demo agent also
// serves A2A at http://127.0.0.1:8099/a2a with one skill, `echo`; docs/API.md, "A2A agents"):
//   TEXT=hi npm run example:a2a-client -- agt_…
import { randomUUID } from 'node:crypto';
import { GetTaskRequest, SendMessageRequest, taskStateToJSON, type Message, type Task } from '@a2a-js/sdk';
import { ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { fail, gatewaySettings, usage } from './settings.ts';

usage(`usage: npm run example:a2a-client -- AGENT_ID
  Sends a message to an A2A agent through the gateway with @a2a-js/sdk's client and reads its
  task back, printing the card's name and skills and the answers. Settings: GATEWAY_URL, TOKEN,
  TEXT, SKILL (examples/a2a-client.ts).`);
const s = gatewaySettings();
const agentId =
  process.argv[2] ??
  process.env.AGENT_ID ??
  fail('name the A2A agent: AGENT_ID=agt_… or its id as the first argument', 2);

// The gateway's token on every request the client makes (the card and the calls).
const withToken: typeof fetch = (input, init) => {
  const headers = new Headers(init?.headers);
  headers.set('authorization', `Bearer ${s.token}`);
  return fetch(input, { ...init, headers });
};

const textOf = (message: Message | undefined) =>
  message?.parts.map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join('') ?? '';

const agentUrl = `${s.gateway}/v1/proxy/${agentId}/`;
try {
  const factory = new ClientFactory({
    transports: [new JsonRpcTransportFactory({ fetchImpl: withToken })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl: withToken }),
  });
  const client = await factory.createFromUrl(agentUrl);
  const card = await client.getAgentCard();
  console.log(`agent card: ${card.name}, skills: ${card.skills.map((k) => k.id).join(', ') || 'none'}`);
  const skill = process.env.SKILL;
  const answer = await client.sendMessage(
    SendMessageRequest.fromJSON({
      message: {
        messageId: randomUUID(),
        role: 'ROLE_USER',
        parts: [{ text: process.env.TEXT ?? 'hello' }],
        ...(skill ? { metadata: { skill } } : {}),
      },
    }),
  );
  if ('messageId' in answer) {
    console.log(`message: ${textOf(answer)}`);
  } else {
    const task = answer as Task;
    console.log(`task ${task.id}: ${textOf(task.status?.message)}`);
    const again = await client.getTask(GetTaskRequest.fromJSON({ id: task.id }));
    console.log(`task ${again.id} read back, state ${again.status ? taskStateToJSON(again.status.state) : 'unknown'}`);
  }
} catch (err) {
  fail(`A2A through ${agentUrl}: ${(err as Error).message.split('\n')[0]}`);
}
