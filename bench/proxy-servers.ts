// Child processes of `npm run bench:proxy`, each on its own process (as in production):
//   node bench/proxy-servers.ts upstream       the upstream: reads the body, answers 1 KiB
//                                              (or, with `x-echo: 1`, streams the body back)
//   node bench/proxy-servers.ts bare URL       the baseline proxy: the least a pass-through
//                                              can do with undici (pipe up, pipe down, strip
//                                              hop-by-hop headers), no auth, no records
//   node bench/proxy-servers.ts metered         the upstream of `npm run bench:paid`: a small JSON
//                                              with the call's charge in X-Usage-Cost
// Each prints `listening PORT` once ready.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'undici';

const [role, target] = process.argv.slice(2);
const ANSWER = Buffer.alloc(1024, 'a');

function upstream(req: IncomingMessage, res: ServerResponse): void {
  if (req.headers['x-echo']) {
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    req.pipe(res);
    return;
  }
  req.on('data', () => undefined);
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': String(ANSWER.length) });
    res.end(ANSWER);
  });
}

const METERED_ANSWER = Buffer.from('{"ok":true}');
/** The charge the metered upstream states for every call, in token units (below the bench's maximum). */
const METERED_COST = '1234';

function metered(req: IncomingMessage, res: ServerResponse): void {
  req.on('data', () => undefined);
  req.on('end', () => {
    res.writeHead(200, {
      'content-type': 'application/json',
      'content-length': String(METERED_ANSWER.length),
      'x-usage-cost': METERED_COST,
    });
    res.end(METERED_ANSWER);
  });
}

const HOP = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'host',
  'proxy-connection',
]);
const dispatcher = new Agent({ keepAliveTimeout: 10_000, connections: 256 });

function bare(req: IncomingMessage, res: ServerResponse): void {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers))
    if (v !== undefined && !HOP.has(k)) headers[k] = Array.isArray(v) ? v.join(', ') : v;
  request(target, { dispatcher, method: 'POST', headers, body: req }).then(
    (up) => {
      const out: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !HOP.has(k)) out[k] = v;
      res.writeHead(up.statusCode, out);
      up.body.pipe(res);
      up.body.on('error', () => res.destroy());
    },
    () => {
      res.writeHead(502).end();
    },
  );
}

const server = createServer(role === 'bare' ? bare : role === 'metered' ? metered : upstream);
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => process.stdout.write(`listening ${(server.address() as AddressInfo).port}\n`));
process.on('SIGTERM', () => process.exit(0));
