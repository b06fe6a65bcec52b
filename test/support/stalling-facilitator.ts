// A facilitator that is slow for one tenant: an mTLS relay in front of the real facilitator that
// passes reads (/supported) through and holds every /settle open without ever answering, as a
// facilitator overwhelmed or hung would; the gateway's settle gives up at its
// SETTLEMENT_TIMEOUT_MS and tries again. It counts the settles it holds now and the most it held
// at once. It presents the dev PKI's server certificate and reads with the account's own client
// certificate. A fake only in that it never settles: nothing here can make the real one slow.
// With `dropAnswers`, a settle is passed to the real facilitator instead, and its answer dropped
// (the connection closed once it came): a settlement that happened, whose answer was lost. With
// `lateSettles`, a settle's connection is closed as soon as it is read, nothing passed on, until
// `passLate()` passes the settles so kept to the real facilitator (their answers dropped): a
// settlement whose outcome was not known, that lands later.
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { Agent, request } from 'undici';
import type { CertAndKeyPem } from '../../scripts/dev/pki.ts';

export type StallingFacilitator = {
  url: string;
  /** The settles held open now, the most held at once, and how many came in all. */
  settles(): { open: number; most: number; total: number };
  /** With `lateSettles`: passes the settles kept so far to the real facilitator, once each; answers their answers' JSON. */
  passLate(): Promise<unknown[]>;
  close(): Promise<void>;
};

export async function startStallingFacilitator(opts: {
  facilitatorUrl: string;
  pki: { serverCert: string; serverKey: string; ca: string };
  account: CertAndKeyPem;
  dropAnswers?: boolean;
  lateSettles?: boolean;
}): Promise<StallingFacilitator> {
  const ca = readFileSync(opts.pki.ca, 'utf8');
  const upstream = new Agent({
    connect: { cert: opts.account.certPem, key: opts.account.keyPem, ca, rejectUnauthorized: true },
  });
  let open = 0;
  let most = 0;
  let total = 0;
  const late: Array<{ path: string; body: Buffer }> = [];
  const pass = (path: string, body: Buffer) =>
    request(new URL(path, opts.facilitatorUrl), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
      dispatcher: upstream,
    }).then((answer) => answer.body.json());
  const server: Server = createServer(
    {
      cert: readFileSync(opts.pki.serverCert),
      key: readFileSync(opts.pki.serverKey),
      ca,
      requestCert: true,
      rejectUnauthorized: true,
    },
    (req, res) => {
      if (req.method === 'GET') {
        void request(new URL(req.url ?? '/', opts.facilitatorUrl), { method: 'GET', dispatcher: upstream })
          .then(async (answer) => {
            res.writeHead(answer.statusCode, { 'content-type': 'application/json' });
            res.end(Buffer.from(await answer.body.arrayBuffer()));
          })
          .catch(() => res.destroy());
        return;
      }
      // A settle: read, then held until its caller gives up (or the relay closes).
      total++;
      most = Math.max(most, ++open);
      res.once('close', () => open--);
      if (!opts.dropAnswers && !opts.lateSettles) {
        req.resume();
        return;
      }
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        if (opts.lateSettles) {
          late.push({ path: req.url ?? '/', body: Buffer.concat(chunks) });
          res.destroy();
          return;
        }
        void pass(req.url ?? '/', Buffer.concat(chunks))
          .catch(() => undefined)
          .finally(() => res.destroy());
      });
    },
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    settles: () => ({ open, most, total }),
    async passLate() {
      const answers: unknown[] = [];
      for (const settle of late.splice(0)) answers.push(await pass(settle.path, settle.body));
      return answers;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await upstream.close();
    },
  };
}
