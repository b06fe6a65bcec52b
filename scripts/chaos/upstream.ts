// The chaos systems' upstream: answers every request, counts them by X-Request-ID (the gateway
// sends its own per call) so a scenario can prove no call reached it twice, and can be told to
// answer 503, hang up or pause.
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
        res.end(JSON.stringify({ echo: Buffer.concat(chunks).length, request_id: id }));
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
