// The facilitator client reads no more of a facilitator's answer than MAX_FACILITATOR_ANSWER_BYTES
// (gateway/payment/facilitator-client.ts): /supported and /settle answer a few hundred bytes, so
// a larger answer, with a Content-Length or streamed without one, is a fault read no further: the
// kinds are unread (null, so no upto entry is offered) and the settle's outcome is unknown. A fake
// facilitator (a TLS server with the stack's dev PKI; nothing here is the real facilitator's
// doing) gives each answer; answers under the cap are read as before.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { Wallet } from 'ethers';
import {
  createFacilitatorClient,
  MAX_FACILITATOR_ANSWER_BYTES,
  type FacilitatorClient,
} from '../../gateway/payment/facilitator-client.ts';
import { issueClientCert } from '../../scripts/dev/pki.ts';
import { stack } from '../support/stack.ts';
import { devCa, newPayTo, requirements, settleBody, signPayment } from '../support/x402.ts';

type Answer = (res: ServerResponse) => void;

const KIND = { x402Version: 2, scheme: 'exact', network: 'eip155:8453' };
const TRANSACTION = `0x${'ab'.repeat(32)}`;

/** JSON padded to `bytes` with a field the readers ignore (the answer stays valid JSON of its shape). */
const padded = (value: Record<string, unknown>, bytes: number) => {
  const bare = JSON.stringify({ ...value, pad: '' });
  return JSON.stringify({ ...value, pad: 'x'.repeat(Math.max(0, bytes - bare.length)) });
};
const whole =
  (body: string): Answer =>
  (res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  };
/** Streamed in 8 KiB pieces, no Content-Length: the cap must hold on the bytes as they come. */
const streamed =
  (body: string): Answer =>
  (res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    for (let i = 0; i < body.length; i += 8192) res.write(body.slice(i, i + 8192));
    res.end();
  };

describe('facilitator client: answers are read up to a cap', function () {
  this.timeout(60_000);
  let server: Server;
  let client: FacilitatorClient;
  let target: { facilitatorUrl: string; certPem: string; keyPem: string };
  // The answer each path gives next.
  const answers = new Map<string, Answer>();

  before(async () => {
    const files = stack().infra.pki.files;
    const ca = readFileSync(files.ca, 'utf8');
    server = createServer(
      { cert: readFileSync(files.serverCert), key: readFileSync(files.serverKey), ca, requestCert: true },
      (req, res) => {
        req.resume();
        req.on('end', () => {
          const answer = answers.get(req.url ?? '');
          if (answer) answer(res);
          else res.writeHead(404).end();
        });
      },
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const host = `127.0.0.1:${(server.address() as AddressInfo).port}`;
    client = createFacilitatorClient({ caPem: ca, timeoutMs: 10_000, allow: [host] });
    target = { facilitatorUrl: `https://${host}/`, ...(await issueClientCert(await devCa(), `cap-${randomUUID()}`)) };
  });
  after(async () => {
    await client?.close();
    await new Promise((resolve) => server?.close(resolve));
  });

  it('/supported: an answer under the cap is read; one over it, whole or streamed, is unread', async () => {
    const under = padded({ kinds: [KIND] }, MAX_FACILITATOR_ANSWER_BYTES - 1024);
    answers.set('/supported', whole(under));
    assert.deepEqual(await client.supported(target), [KIND]);
    answers.set('/supported', streamed(under));
    assert.deepEqual(await client.supported(target), [KIND]);

    const over = padded({ kinds: [KIND] }, MAX_FACILITATOR_ANSWER_BYTES + 1024);
    answers.set('/supported', whole(over));
    assert.equal(await client.supported(target), null);
    answers.set('/supported', streamed(padded({ kinds: [KIND] }, 8 * MAX_FACILITATOR_ANSWER_BYTES)));
    assert.equal(await client.supported(target), null);

    // The pool still serves the next answer.
    answers.set('/supported', whole(JSON.stringify({ kinds: [KIND] })));
    assert.deepEqual(await client.supported(target), [KIND]);
  });

  it('/settle: an answer over the cap leaves the outcome unknown, one under it is read', async () => {
    const payTo = newPayTo();
    // Never settled anywhere: the fake facilitator only answers.
    const payer = new Wallet(Wallet.createRandom().privateKey);
    const body = settleBody(await signPayment(payer, { payTo, value: 1_000n }), requirements(payTo, 1_000n));
    const settled = { success: true, transaction: TRANSACTION, network: 'base', payer: payer.address };

    answers.set('/settle', whole(padded(settled, MAX_FACILITATOR_ANSWER_BYTES + 1024)));
    assert.deepEqual(await client.settle(target, body), { ok: false, error: 'settlement_unavailable' });
    answers.set('/settle', streamed(padded(settled, 4 * MAX_FACILITATOR_ANSWER_BYTES)));
    assert.deepEqual(await client.settle(target, body), { ok: false, error: 'settlement_unavailable' });

    answers.set('/settle', whole(padded(settled, MAX_FACILITATOR_ANSWER_BYTES - 1024)));
    const outcome = await client.settle(target, body);
    assert.equal(outcome.ok, true, JSON.stringify(outcome));
    assert.equal(outcome.ok && outcome.transaction, TRANSACTION);
  });
});
