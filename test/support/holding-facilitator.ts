// An mTLS relay in front of the real facilitator that forwards /settle and then holds the
// answer instead of passing it on (a GET, such as /supported, is passed through): the
// settlement is done (on chain, in the facilitator's records) while the gateway that asked is
// still waiting. With `rewrite`, every answer is passed on, changed (a facilitator answering badly). A test kills the gateway then, to
// stage a crash between settlement and acceptance. The relay presents the dev PKI's server
// certificate and speaks to the facilitator with the account's own client certificate.
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { Agent, request } from 'undici';
import type { CertAndKeyPem } from '../../scripts/dev/pki.ts';

export type HoldingFacilitator = {
  url: string;
  /** The facilitator's answer to the first /settle, once it came (it is never passed on). */
  held: Promise<{ status: number; json: Record<string, unknown> }>;
  close(): Promise<void>;
};

export async function startHoldingFacilitator(opts: {
  facilitatorUrl: string;
  pki: { serverCert: string; serverKey: string; ca: string };
  account: CertAndKeyPem;
  /** Pass every /settle answer on, changed by this, instead of holding the first (a facilitator answering badly). */
  rewrite?: (json: Record<string, unknown>) => Record<string, unknown>;
}): Promise<HoldingFacilitator> {
  const ca = readFileSync(opts.pki.ca, 'utf8');
  const upstream = new Agent({
    connect: { cert: opts.account.certPem, key: opts.account.keyPem, ca, rejectUnauthorized: true },
  });
  let hold!: (answer: { status: number; json: Record<string, unknown> }) => void;
  const held = new Promise<{ status: number; json: Record<string, unknown> }>((resolve) => {
    hold = resolve;
  });
  const server: Server = createServer(
    {
      cert: readFileSync(opts.pki.serverCert),
      key: readFileSync(opts.pki.serverKey),
      ca,
      requestCert: true,
      rejectUnauthorized: true,
    },
    (req, res) => {
      // A read (/supported) is passed through: only a settle is held.
      if (req.method === 'GET') {
        void request(new URL(req.url ?? '/', opts.facilitatorUrl), { method: 'GET', dispatcher: upstream })
          .then(async (answer) => {
            res.writeHead(answer.statusCode, { 'content-type': 'application/json' });
            res.end(Buffer.from(await answer.body.arrayBuffer()));
          })
          .catch(() => res.destroy());
        return;
      }
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        void request(new URL('/settle', opts.facilitatorUrl), {
          method: 'POST',
          dispatcher: upstream,
          headers: { 'content-type': 'application/json' },
          body: Buffer.concat(chunks),
        })
          .then(async (answer) => {
            const json = (await answer.body.json()) as Record<string, unknown>;
            if (!opts.rewrite) return hold({ status: answer.statusCode, json });
            res.writeHead(answer.statusCode, { 'content-type': 'application/json' });
            res.end(JSON.stringify(opts.rewrite(json)));
          })
          .catch(() => res.destroy());
      });
    },
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    held,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await upstream.close();
    },
  };
}
