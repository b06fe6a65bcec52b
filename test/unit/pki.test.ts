import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { certFingerprint256, ensureDevPki, issueClientCert } from '../../scripts/dev/pki.ts';
import type { CertAndKeyPem, DevPki } from '../../scripts/dev/pki.ts';

interface ClientResult {
  status?: number;
  body?: string;
  error?: Error;
}

describe('facilitator dev PKI (mutual TLS)', function () {
  let workDir: string;
  let pki: DevPki;
  let server: https.Server;
  let port: number;
  // What the handler saw, so tests can prove a rejected client never got this far.
  let handledFingerprints: string[];

  before(async function () {
    workDir = await mkdtemp(join(tmpdir(), 'pki-test-'));
    pki = await ensureDevPki(join(workDir, 'pki'));

    server = https.createServer(
      {
        key: pki.serverKeyPem,
        cert: pki.serverCertPem,
        ca: pki.caCertPem,
        requestCert: true,
        rejectUnauthorized: true,
      },
      (req, res) => {
        // `?? ''` keeps the handler answering even if a certificate-less client got through,
        // so such a regression fails the assertions instead of hanging the request.
        const peer = (req.socket as TLSSocket).getPeerCertificate();
        const fingerprint = (peer.fingerprint256 ?? '').replaceAll(':', '').toLowerCase();
        handledFingerprints.push(fingerprint);
        res.end(fingerprint);
      },
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });

  beforeEach(function () {
    handledFingerprints = [];
  });

  after(async function () {
    if (server) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await closed;
    }
    if (workDir) await rm(workDir, { recursive: true, force: true });
  });

  // Connects to 127.0.0.1 so the server certificate's IP SAN is what gets verified.
  function get(clientCert?: CertAndKeyPem): Promise<ClientResult> {
    return new Promise((resolve) => {
      const req = https.request(
        {
          host: '127.0.0.1',
          port,
          path: '/settle',
          method: 'GET',
          ca: pki.caCertPem,
          cert: clientCert?.certPem,
          key: clientCert?.keyPem,
          agent: false,
        },
        (res) => {
          let body = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => (body += chunk));
          res.on('end', () => resolve({ status: res.statusCode, body }));
          res.on('error', (error) => resolve({ error }));
        },
      );
      req.on('error', (error) => resolve({ error }));
      req.end();
    });
  }

  const devClient = (): CertAndKeyPem => ({ certPem: pki.clientCertPem, keyPem: pki.clientKeyPem });

  it('reuses the stored PKI on a second call', async function () {
    const again = await ensureDevPki(join(workDir, 'pki'));
    assert.deepEqual(again, pki);
  });

  it('writes private keys as PKCS#8 PEM readable only by the owner', async function () {
    for (const keyFile of [pki.files.caKey, pki.files.serverKey, pki.files.clientKey]) {
      assert.equal((await stat(keyFile)).mode & 0o777, 0o600, keyFile);
      assert.match(await readFile(keyFile, 'utf8'), /^-----BEGIN PRIVATE KEY-----/);
    }
  });

  it('accepts the dev client certificate and exposes its fingerprint to the handler', async function () {
    const result = await get(devClient());
    assert.ifError(result.error);
    assert.equal(result.status, 200);
    assert.equal(result.body, certFingerprint256(pki.clientCertPem));
    assert.deepEqual(handledFingerprints, [certFingerprint256(pki.clientCertPem)]);
    assert.match(certFingerprint256(pki.clientCertPem), /^[0-9a-f]{64}$/);
  });

  it('fails the handshake for a client without a certificate', async function () {
    const result = await get();
    assert.ok(result.error, `expected a TLS failure, got status ${result.status}`);
    assert.deepEqual(handledFingerprints, []);
  });

  it('rejects a client certificate from a different CA', async function () {
    const foreignPki = await ensureDevPki(join(workDir, 'foreign-pki'));
    assert.notEqual(foreignPki.caCertPem, pki.caCertPem);
    const result = await get({ certPem: foreignPki.clientCertPem, keyPem: foreignPki.clientKeyPem });
    assert.ok(result.error, `expected a TLS failure, got status ${result.status}`);
    assert.deepEqual(handledFingerprints, []);
  });

  it('accepts a client certificate issued later with issueClientCert', async function () {
    const ca = { certPem: pki.caCertPem, keyPem: await readFile(pki.files.caKey, 'utf8') };
    const account = await issueClientCert(ca, 'facilitator-account-2');
    const result = await get(account);
    assert.ifError(result.error);
    assert.equal(result.status, 200);
    assert.deepEqual(handledFingerprints, [certFingerprint256(account.certPem)]);
    assert.notEqual(certFingerprint256(account.certPem), certFingerprint256(pki.clientCertPem));
  });

  it('reissues only the server certificate when asked to cover a new host', async function () {
    const dir = join(workDir, 'hosts-pki');
    const first = await ensureDevPki(dir);
    const widened = await ensureDevPki(dir, { serverHosts: ['facilitator.internal', '10.1.2.3'] });
    assert.notEqual(widened.serverCertPem, first.serverCertPem);
    assert.equal(widened.caCertPem, first.caCertPem);
    assert.equal(widened.clientCertPem, first.clientCertPem);
    assert.deepEqual(await ensureDevPki(dir, { serverHosts: ['facilitator.internal'] }), widened);
  });
});
