// `npm run facilitator -- accounts add|list|deactivate` as an operator runs it: a real child
// process against the facilitator's database; the account it adds can settle over mutual TLS
// with its certificate, and once deactivated gets 403.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { stack } from './support/stack.ts';
import { devCa, facilitatorClient, newPayTo, newPayer, requirements, settleBody, signPayment } from './support/x402.ts';
import { certFingerprint256, issueClientCert } from '../scripts/dev/pki.ts';

const run = promisify(execFile);

async function cli(...args: string[]): Promise<{ stdout: string; code: number; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['scripts/facilitator.ts', ...args], {
      env: {
        ...process.env,
        FACILITATOR_DATABASE_URL: stack().infra.facilitatorDatabaseUrl,
        TOKEN_ADDRESS: stack().infra.tokenAddress,
        // The data folder of the test stack: its dev CA is in DATA_DIR/pki, as npm start's is.
        DATA_DIR: dirname(dirname(stack().infra.pki.files.ca)),
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
