// A node:http adapter around @a2a-js/sdk's request handler, for the A2A servers of the demo
// agent (scripts/demo-upstream.ts) and of the tests (test/support/a2a-server.ts). The SDK's own
// adapter needs express, which the project does not depend on; this does what its express
// jsonRpcHandler does: the card at /.well-known/agent-card.json, JSON-RPC by POST, A2A 1.0 for a
// request with `A2A-Version: 1.0` and the SDK's 0.3 compatibility handler otherwise, a stream
// answered as SSE (`data: <JSON-RPC response>` events), anything else as one JSON body.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { AgentCard } from '@a2a-js/sdk';
import { JsonRpcTransportHandler, ServerCallContext, type DefaultRequestHandler } from '@a2a-js/sdk/server';
import { LegacyJsonRpcTransportHandler } from '@a2a-js/sdk/compat/v0_3/server';

const isStream = (answer: unknown): answer is AsyncGenerator<unknown> =>
  typeof (answer as AsyncGenerator<unknown> | null)?.[Symbol.asyncIterator] === 'function';

/** Answers one request (its body already read) for `handler`, whose card is `card`. */
export async function serveA2a(
  handler: DefaultRequestHandler,
  card: AgentCard,
  req: IncomingMessage,
  res: ServerResponse,
  body: Buffer,
): Promise<void> {
  if (req.method === 'GET' && new URL(req.url ?? '/', 'http://a2a').pathname === '/.well-known/agent-card.json') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(AgentCard.toJSON(card)));
    return;
  }
  if (req.method !== 'POST') return void res.writeHead(405, { allow: 'POST' }).end();
  let request: unknown;
  try {
    request = JSON.parse(body.toString('utf8'));
  } catch {
    request = body.toString('utf8'); // the handler answers a JSON-RPC parse error
  }
  const legacy = (req.headers['a2a-version'] ?? '0.3') === '0.3';
  const transport = legacy ? new LegacyJsonRpcTransportHandler(handler) : new JsonRpcTransportHandler(handler);
  const answer = await transport.handle(
    request as Record<string, unknown>,
    new ServerCallContext({ requestedVersion: legacy ? '0.3' : '1.0' }),
  );
  if (isStream(answer)) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.flushHeaders();
    for await (const event of answer) res.write(`data: ${JSON.stringify(event)}\n\n`);
    res.end();
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
}
