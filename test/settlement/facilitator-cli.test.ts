// `npm run facilitator -- accounts add|list|deactivate` as an operator runs it: a real child
// process against the facilitator's database; the account it adds can settle over mutual TLS
// with its certificate, and once deactivated gets 403.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createPrivateKey, webcrypto } from 'node:crypto';
import { mkdir, mkdtemp, readFile, stat, writeFile } from 'node:fs/promises';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { Wallet } from 'ethers';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { stack } from '../support/stack.ts';
import {
  devCa,
  facilitatorClient,
  newPayTo,
  newPayer,
  requirements,
  settleBody,
  signPayment,
} from '../support/x402.ts';
import { certFingerprint256, issueClientCert } from '../../scripts/dev/pki.ts';

const run = promisify(execFile);

function cli(...args: string[]): Promise<{ stdout: string; code: number; stderr: string }> {
  return cliWith({}, ...args);
}

async function cliWith(
  env: Record<string, string | undefined>,
  ...args: string[]
): Promise<{ stdout: string; code: number; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['scripts/facilitator.ts', ...args], {
      env: {
        ...process.env,
        FACILITATOR_DATABASE_URL: stack().infra.facilitatorDatabaseUrl,
        TOKEN_ADDRESS: stack().infra.tokenAddress,
        // The data folder of the test stack: its dev CA is in DATA_DIR/pki, as npm start's is.
        DATA_DIR: dirname(dirname(stack().infra.pki.files.ca)),
        ...env,
      },
    });
    return { stdout, stderr, code: 0 };
  } catch (err) {
    const e = err as { stdout: string; stderr: string; code: number };
    return { stdout: e.stdout, stderr: e.stderr, code: e.code };
  }
}

describe('facilitator accounts CLI', function () {
  this.timeout(60_000);

  it('adds an account from a certificate file with its guardrails, lists it, deactivates it', async () => {
    const cert = await issueClientCert(await devCa(), 'cli-gateway');
    const dir = await mkdtemp(join(tmpdir(), 'fac-cli-'));
    const certFile = join(dir, 'client.pem');
    await writeFile(certFile, cert.certPem);
    const name = `cli-${Date.now()}`;

    const added = await cli(
      'accounts',
      'add',
      '--cert',
      certFile,
      '--name',
      name,
      '--max-per-tx',
      '5000',
      '--daily-ceiling',
      '20000',
    );
    assert.equal(added.code, 0, added.stderr);
    assert.match(added.stdout, /^added/);
    assert.match(added.stdout, new RegExp(certFingerprint256(cert.certPem)));

    const again = await cli('accounts', 'add', '--cert', certFile, '--name', `${name}-2`);
    assert.equal(again.code, 2);
    assert.match(again.stderr, /already exists/);
    assert.equal((await cli('accounts', 'add', '--name', 'x')).code, 2);
    assert.equal((await cli('accounts', 'add', '--cert', certFile, '--name', 'x', '--kind', 'base:nothex')).code, 2);
    // A deployment's database and no token named: no guess at the kind (npm start's dev token would be wrong there).
    const unnamed = await cliWith({ TOKEN_ADDRESS: '' }, 'accounts', 'add', '--cert', certFile, '--name', 'x');
    assert.equal(unnamed.code, 2, unnamed.stdout);
    assert.match(unnamed.stderr, /accounts add needs the kind the account settles: TOKEN_ADDRESS/);

    const listed = await cli('accounts', 'list', '--json');
    const account = (JSON.parse(listed.stdout) as Array<Record<string, unknown>>).find((a) => a.name === name);
    assert.ok(account);
    assert.equal(account.active, true);
    assert.equal(account.maxPerTx, '5000');
    assert.equal(account.dailyCeiling, '20000');
    assert.deepEqual(account.allowedKinds, [{ network: 'base', asset: stack().infra.tokenAddress }]);

    const client = await facilitatorClient(cert);
    const payer = await newPayer();
    const payTo = newPayTo();
    const ok = await client.post(
      '/settle',
      settleBody(await signPayment(payer, { payTo, value: 5_000n }), requirements(payTo, 5_000n)),
    );
    assert.equal(ok.json.success, true, JSON.stringify(ok.json));
    const over = await client.post(
      '/settle',
      settleBody(await signPayment(payer, { payTo, value: 5_001n }), requirements(payTo, 5_001n)),
    );
    assert.equal(over.status, 429);
    // The list shows what is in force and what today has used: the settled 5,000 of the ceiling.
    const after = (JSON.parse((await cli('accounts', 'list', '--json')).stdout) as Array<Record<string, unknown>>).find(
      (a) => a.name === name,
    )!;
    assert.equal(after.effectiveMaxPerTx, '5000');
    assert.equal(after.effectiveDailyCeiling, '20000');
    assert.equal(after.usedToday, '5000');
    const text = (await cli('accounts', 'list')).stdout;
    assert.match(
      text,
      new RegExp(
        `${name}[\\s\\S]*max/tx 5000, daily 20000[\\s\\S]*today \\(UTC\\): 5000 of the daily ceiling reserved`,
      ),
    );
    assert.doesNotMatch(text, /max\/tx default/, 'an account without limits of its own shows the default in force');

    const deactivated = await cli('accounts', 'deactivate', '--cert', certFile);
    assert.equal(deactivated.code, 0, deactivated.stderr);
    assert.match(deactivated.stdout, /inactive/);
    const denied = await client.post(
      '/settle',
      settleBody(await signPayment(payer, { payTo, value: 1_000n }), requirements(payTo, 1_000n)),
    );
    assert.equal(denied.status, 403);
    assert.equal((await cli('accounts', 'deactivate', 'fac_nonexistent')).code, 2);
    await client.close();
  });

  it('certs issue: a client certificate from the dev CA, which the facilitator accepts once it is an account', async () => {
    const out = await mkdtemp(join(tmpdir(), 'fac-certs-'));
    const name = `issued-${Date.now()}`;
    const issued = await cli('certs', 'issue', '--name', name, '--out', out);
    assert.equal(issued.code, 0, issued.stderr);
    assert.match(issued.stderr, /^facilitator: data folder /);
    const certFile = join(out, `${name}-cert.pem`);
    const keyFile = join(out, `${name}-key.pem`);
    assert.match(issued.stdout, new RegExp(`accounts add --cert ${certFile} --name ${name}`));
    assert.equal((await stat(keyFile)).mode & 0o777, 0o600);
    const cert = { certPem: await readFile(certFile, 'utf8'), keyPem: await readFile(keyFile, 'utf8') };
    assert.match(issued.stdout, new RegExp(certFingerprint256(cert.certPem)));

    const again = await cli('certs', 'issue', '--name', name, '--out', out);
    assert.equal(again.code, 2);
    assert.match(again.stderr, /exists already/);

    const client = await facilitatorClient(cert);
    const payer = await newPayer();
    const payTo = newPayTo();
    assert.equal((await cli('accounts', 'add', '--cert', certFile, '--name', name)).code, 0);
    const settled = await client.post(
      '/settle',
      settleBody(await signPayment(payer, { payTo, value: 1_000n }), requirements(payTo, 1_000n)),
    );
    assert.equal(settled.json.success, true, JSON.stringify(settled.json));
    await client.close();
  });
});

describe("the facilitator's production secrets, with the project's own commands", function () {
  this.timeout(60_000);

  it('keystore create: an encrypted keystore the password file opens, its address printed, never its key; no overwrite', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fac-keystore-'));
    const passwordFile = join(dir, 'gas.password');
    await writeFile(passwordFile, 'a long enough password\n');
    const out = join(dir, 'gas.json');
    const created = await cli('keystore', 'create', '--out', out, '--password-file', passwordFile);
    assert.equal(created.code, 0, created.stderr);
    assert.equal((await stat(out)).mode & 0o777, 0o600);
    const json = await readFile(out, 'utf8');
    // Read as the facilitator worker reads FACILITATOR_KEYSTORE_PASSWORD_FILE (trimmed).
    const wallet = await Wallet.fromEncryptedJson(json, 'a long enough password');
    assert.match(created.stdout, new RegExp(`^ address ${wallet.address}$`, 'm'));
    assert.ok(!(created.stdout + created.stderr).includes(wallet.privateKey.slice(2)), 'the key is never printed');
    assert.ok(!json.includes(wallet.privateKey.slice(2)), 'the key is stored encrypted');

    const again = await cli('keystore', 'create', '--out', out, '--password-file', passwordFile);
    assert.equal(again.code, 2);
    assert.match(again.stderr, /^facilitator: --out .*gas\.json exists already/);
    assert.equal(await readFile(out, 'utf8'), json, 'the existing keystore is untouched');

    await writeFile(passwordFile, 'short');
    const weak = await cli('keystore', 'create', '--out', join(dir, 'other.json'), '--password-file', passwordFile);
    assert.equal(weak.code, 2);
    assert.match(weak.stderr, /at least 12 characters/);
  });

  /** An HTTPS listener with the facilitator's TLS settings (facilitator-service/server.ts): mutual TLS against `ca`. */
  async function mutualTlsServer(files: { cert: string; key: string; ca: string }) {
    const server = https.createServer(
      {
        cert: await readFile(files.cert),
        key: await readFile(files.key),
        ca: await readFile(files.ca),
        requestCert: true,
        rejectUnauthorized: true,
      },
      (_req, res) => res.end('ok'),
    );
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return server;
  }

  /** A call as the gateway makes it: the server checked against `ca` and `host`, `client` presented. */
  function call(port: number, host: string, ca: string, client: { cert: string; key: string }): Promise<string> {
    return new Promise((resolve) => {
      const req = https.request(
        { host: '127.0.0.1', servername: host, port, ca, cert: client.cert, key: client.key, agent: false },
        (res) => {
          res.resume();
          res.on('end', () => resolve(`${res.statusCode}`));
        },
      );
      req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
      req.end();
    });
  }

  for (const caKind of ['certs ca (ECDSA P-256)', 'an RSA CA of your own'] as const) {
    it(`certs issue from ${caKind}: server and client certificates the facilitator's TLS accepts; a server certificate is no client`, async () => {
      const dir = await mkdtemp(join(tmpdir(), 'fac-pki-'));
      const ca = { cert: join(dir, 'ca', 'ca-cert.pem'), key: join(dir, 'ca', 'ca-key.pem') };
      if (caKind === 'an RSA CA of your own') await writeRsaCa(ca);
      else {
        const made = await cli('certs', 'ca', '--out', join(dir, 'ca'), '--name', 'operator CA');
        assert.equal(made.code, 0, made.stderr);
        assert.equal((await stat(ca.key)).mode & 0o777, 0o600);
        assert.equal((await cli('certs', 'ca', '--out', join(dir, 'ca'))).code, 2, 'never overwrites a CA');
      }
      const fromCa = ['--ca-cert', ca.cert, '--ca-key', ca.key];
      const host = 'facilitator.internal';
      const srv = await cli(
        'certs',
        'issue',
        ...fromCa,
        '--name',
        'facilitator',
        '--host',
        host,
        '--host',
        '127.0.0.1',
        '--out',
        dir,
      );
      assert.equal(srv.code, 0, srv.stderr);
      assert.match(srv.stdout, /FACILITATOR_TLS_CERT=/);
      const gw = await cli('certs', 'issue', ...fromCa, '--name', 'gateway', '--out', dir);
      assert.equal(gw.code, 0, gw.stderr);
      assert.match(gw.stdout, /accounts add --cert .*gateway-cert\.pem --name gateway/);
      assert.doesNotMatch(srv.stdout + gw.stdout, /PRIVATE KEY/);
      const file = (name: string) => readFile(join(dir, name), 'utf8');

      const server = await mutualTlsServer({
        cert: join(dir, 'facilitator-cert.pem'),
        key: join(dir, 'facilitator-key.pem'),
        ca: ca.cert,
      });
      try {
        const port = (server.address() as AddressInfo).port;
        const caPem = await readFile(ca.cert, 'utf8');
        const client = { cert: await file('gateway-cert.pem'), key: await file('gateway-key.pem') };
        assert.equal(await call(port, host, caPem, client), '200');
        // The server certificate names its hosts: another name is refused by the caller.
        assert.equal(await call(port, 'other.internal', caPem, client), 'ERR_TLS_CERT_ALTNAME_INVALID');
        // A server certificate (serverAuth only) presented as a client fails the handshake.
        const asClient = { cert: await file('facilitator-cert.pem'), key: await file('facilitator-key.pem') };
        assert.notEqual(await call(port, host, caPem, asClient), '200');
      } finally {
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
      }
    });
  }

  it('certs issue refuses a CA it cannot use, in one line: not a CA, a key that is not its, half a pair', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'fac-pki-bad-'));
    assert.equal((await cli('certs', 'ca', '--out', join(dir, 'a'))).code, 0);
    assert.equal((await cli('certs', 'ca', '--out', join(dir, 'b'))).code, 0);
    const leaf = await cli(
      'certs',
      'issue',
      '--ca-cert',
      join(dir, 'a/ca-cert.pem'),
      '--ca-key',
      join(dir, 'a/ca-key.pem'),
      '--name',
      'leaf',
      '--out',
      dir,
    );
    assert.equal(leaf.code, 0, leaf.stderr);
    for (const [args, message] of [
      [['--ca-cert', join(dir, 'leaf-cert.pem'), '--ca-key', join(dir, 'leaf-key.pem')], /is not a CA certificate/],
      [['--ca-cert', join(dir, 'a/ca-cert.pem'), '--ca-key', join(dir, 'b/ca-key.pem')], /is not the key of/],
      [['--ca-cert', join(dir, 'a/ca-cert.pem')], /--ca-cert and --ca-key go together/],
    ] as const) {
      const r = await cli('certs', 'issue', ...args, '--name', 'x', '--out', dir);
      assert.equal(r.code, 2, r.stdout + r.stderr);
      assert.equal(r.stderr.trim().split('\n').length, 1, r.stderr);
      assert.match(r.stderr, message);
    }
  });
});

/** A CA as an operator's own PKI may hold it: RSA 2048, its key in PKCS#1 PEM ("RSA PRIVATE KEY"). */
async function writeRsaCa(ca: { cert: string; key: string }): Promise<void> {
  const x509 = await import('@peculiar/x509');
  const algorithm = {
    name: 'RSASSA-PKCS1-v1_5',
    hash: 'SHA-256',
    publicExponent: new Uint8Array([1, 0, 1]),
    modulusLength: 2048,
  };
  const keys = await webcrypto.subtle.generateKey(algorithm, true, ['sign', 'verify']);
  const cert = await x509.X509CertificateGenerator.createSelfSigned(
    {
      name: 'CN=operator RSA CA',
      keys,
      notBefore: new Date(Date.now() - 60_000),
      notAfter: new Date(Date.now() + 86_400_000),
      signingAlgorithm: algorithm,
      extensions: [new x509.BasicConstraintsExtension(true, 0, true)],
    },
    webcrypto,
  );
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey));
  await mkdir(dirname(ca.cert), { recursive: true });
  await writeFile(ca.cert, cert.toString('pem'));
  await writeFile(
    ca.key,
    createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' }).export({ type: 'pkcs1', format: 'pem' }),
  );
}
