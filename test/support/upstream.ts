// Real local HTTP upstreams for tests: they record what reached them and answer as told.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export type Received = { method: string; url: string; headers: IncomingMessage['headers']; body: Buffer };

export type TestUpstream = {
  url: string;
  received: Received[];
  close(): Promise<void>;
};

export async function startUpstream(
  handler: (req: Received, res: ServerResponse) => void = (req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ echo: req.body.toString('utf8') }));
  },
): Promise<TestUpstream> {
  const received: Received[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const entry = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks) };
      received.push(entry);
      handler(entry, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/agent`,
    received,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
