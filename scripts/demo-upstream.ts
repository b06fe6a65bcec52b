// A tiny echo agent for the quick start: answers every POST with what it received.
import { createServer } from 'node:http';

const port = Number(process.env.DEMO_UPSTREAM_PORT ?? 8099);
createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    res.setHeader('content-type', 'application/json');
    res.end(
      JSON.stringify({ echo: Buffer.concat(chunks).toString('utf8'), request_id: req.headers['x-request-id'] ?? null }),
    );
  });
}).listen(port, '127.0.0.1');
