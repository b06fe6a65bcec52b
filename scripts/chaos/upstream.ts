// The chaos systems' upstream: answers every request, counts them by X-Request-ID (the gateway
// sends its own per call) so a scenario can prove no call reached it twice, and can be told to
// answer 503, hang up or pause. It is also an A2A agent as far as the gateway needs one: its card
// at /.well-known/agent-card.json (not counted), and a JSON-RPC request answered with a task
// completed at once, `task-<X-Request-ID>`.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';

export type UpstreamMode = 'ok' | 'fail' | 'reset';

export type CountingUpstream = {
  url: string;
  hostPort: string;
  /** Requests seen per X-Request-ID. */
  counts: Map<string, number>;
  total(): number;
  /** X-Request-IDs of the requests received and not yet answered (held by `delayMs`), oldest first: calls a kill can land on. */
  inFlight(): string[];
  mode: UpstreamMode;
  /** Milliseconds each answer waits before it is sent (so kills land on calls in flight). */
  delayMs: number;
  close(): Promise<void>;
};

function card(url: string) {
  return {
    name: 'chaos-upstream',
    version: '1.0.0',
    supportedInterfaces: [{ url, protocolBinding: 'JSONRPC', protocolVersion: '1.0' }],
    skills: [{ id: 'echo', name: 'echo', description: 'answers at once', tags: [] }],
  };
}

/** A JSON-RPC request gets a completed task named after the call; anything else an echo. */
function answerTo(body: Buffer, id: string): unknown {
  type Rpc = { jsonrpc?: unknown; id?: unknown } | null;
  let rpc: Rpc = null;
  try {
    rpc = JSON.parse(body.toString('utf8')) as Rpc;
  } catch {
    // not JSON: an echo
  }
  if (rpc?.jsonrpc !== '2.0') return { echo: body.length, request_id: id };
  const task = { id: `task-${id}`, contextId: `context-${id}`, status: { state: 'TASK_STATE_COMPLETED' } };
  return { jsonrpc: '2.0', id: rpc.id ?? null, result: { task } };
}

export async function startCountingUpstream(delayMs = 0): Promise<CountingUpstream> {
  const counts = new Map<string, number>();
  let total = 0;
  const held = new Map<number, string>();
  const state: CountingUpstream = {
    url: '',
    hostPort: '',
    counts,
    total: () => total,
    inFlight: () => [...held.values()],
    mode: 'ok',
    delayMs,
    close: async () => undefined,
  };
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    if (req.method === 'GET' && req.url === '/.well-known/agent-card.json') {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify(card(state.url)));
      return;
    }
    const id = String(req.headers['x-request-id'] ?? '');
    const seq = total++;
    held.set(seq, id);
    res.once('close', () => held.delete(seq));
    counts.set(id, (counts.get(id) ?? 0) + 1);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const mode = state.mode;
      if (mode === 'reset') return req.socket.destroy();
      setTimeout(() => {
        res.statusCode = mode === 'fail' ? 503 : 200;
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify(answerTo(Buffer.concat(chunks), id)));
      }, state.delayMs);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  state.url = `http://127.0.0.1:${port}/`;
  state.hostPort = `127.0.0.1:${port}`;
  state.close = () =>
    new Promise<void>((r) => {
      server.closeAllConnections();
      server.close(() => r());
    });
  return state;
}
