// The settlement facilitator on the real stack (anvil + token, Temporal, PostgreSQL): mutual TLS
// and accounts, /settle exactly once (also under 50 concurrent duplicates), collection
// outcomes with one coarse reason, every guardrail's 429, and readiness.
import assert from 'node:assert/strict';
import { createReadiness } from '../../facilitator-service/readiness.ts';
import { connect } from 'node:tls';
import { request } from 'undici';
import { Wallet, toQuantity, parseEther } from 'ethers';
import { DEV_ACCOUNTS, tokenContract } from '../../scripts/dev/chain.ts';
import { stack } from '../support/stack.ts';
import { waitFor } from '../support/wait.ts';
import {
  balanceOf,
  chainProvider,
  devCa,
  facilitatorClient,
  newAccount,
  newPayTo,
  newPayer,
  requirements,
  settleBody,
  signPayment,
  transfersTo,
  type TestAccount,
} from '../support/x402.ts';
import { createAccountLookup, deactivateAccount } from '../../facilitator/accounts.ts';
import { ensureDevPki, issueClientCert } from '../../scripts/dev/pki.ts';
import { mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findSettlement, settlementKey } from '../../facilitator/store/records.ts';
import { finalRecord, until } from '../support/facilitator.ts';
import { HTTPFacilitatorClient } from '@x402/core/server';

describe('facilitator', function () {
  this.timeout(120_000);
  let provider: ReturnType<typeof chainProvider>;
  let gateway: TestAccount;

  before(async () => {
    provider = chainProvider();
    gateway = await newAccount('facilitator-test-gateway');
  });
  after(async () => {
    await gateway.client.close();
    provider.destroy();
  });

  const keyOf = (payer: string, nonce: string) => settlementKey(8453, stack().infra.tokenAddress, payer, nonce);
  const gasNonce = () => provider.getTransactionCount(stack().facilitator.gasWallet, 'latest');

  describe('open endpoints', () => {
    it('GET /supported names the kinds on both listeners: exact, upto with the gas wallet to sign for, batch-settlement with its receiver authorizer, and the gas wallet as signer', async () => {
      const expected = {
        kinds: [
          { x402Version: 1, scheme: 'exact', network: 'base', asset: stack().infra.tokenAddress },
          {
            x402Version: 2,
            scheme: 'upto',
            network: 'eip155:8453',
            asset: stack().infra.tokenAddress,
            extra: { facilitatorAddress: stack().facilitator.gasWallet },
          },
          {
            x402Version: 2,
            scheme: 'batch-settlement',
            network: 'eip155:8453',
            asset: stack().infra.tokenAddress,
            extra: { receiverAuthorizer: stack().infra.receiverAuthorizer.address },
          },
        ],
        signers: { 'eip155:*': [stack().facilitator.gasWallet] },
      };
      const open = await request(`${stack().facilitator.publicUrl}/supported`);
      assert.equal(open.statusCode, 200);
      assert.deepEqual(await open.body.json(), expected);
      const overTls = await gateway.client.get('/supported');
      assert.equal(overTls.status, 200);
      assert.deepEqual(overTls.json, expected);
    });

    it('the x402 reference HTTPFacilitatorClient.getSupported() parses /supported unmodified', async () => {
      const supported = await new HTTPFacilitatorClient({ url: stack().facilitator.publicUrl }).getSupported();
      // The reference's schema keeps the fields it knows (`asset` is ours, beside them).
      assert.deepEqual(supported.kinds, [
        { x402Version: 1, scheme: 'exact', network: 'base' },
        {
          x402Version: 2,
          scheme: 'upto',
          network: 'eip155:8453',
          extra: { facilitatorAddress: stack().facilitator.gasWallet },
        },
        {
          x402Version: 2,
          scheme: 'batch-settlement',
          network: 'eip155:8453',
          extra: { receiverAuthorizer: stack().infra.receiverAuthorizer.address },
        },
      ]);
      assert.deepEqual(supported.signers, { 'eip155:*': [stack().facilitator.gasWallet] });
    });

    it('GET /healthz is live; ?ready=1 checks RPC and gas balance', async () => {
      const live = await request(`${stack().facilitator.publicUrl}/healthz`);
      assert.equal(live.statusCode, 200);
      assert.deepEqual(await live.body.json(), { status: 'ok' });
      const ready = await request(`${stack().facilitator.publicUrl}/healthz?ready=1`);
      assert.equal(ready.statusCode, 200);
      assert.deepEqual(await ready.body.json(), { status: 'ready', checks: { rpc: true, gas_balance: true } });
    });

    it('the public port has no /settle', async () => {
      const res = await request(`${stack().facilitator.publicUrl}/settle`, { method: 'POST', body: '{}' });
      assert.equal(res.statusCode, 404);
      await res.body.dump();
    });
  });

  describe('authentication', () => {
    it('refuses the TLS handshake without a client certificate', async () => {
      const { port } = new URL(stack().facilitator.url);
      const error = await new Promise<Error | null>((resolve) => {
        const socket = connect(
          { host: '127.0.0.1', port: Number(port), ca: stack().infra.pki.caCertPem, servername: 'localhost' },
          () => {
            // TLS 1.3: the server's refusal arrives after the client's handshake completes; a read shows it.
            socket.write('POST /settle HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}');
          },
        );
        socket.once('data', () => resolve(null));
        socket.once('error', (err) => resolve(err));
        socket.once('close', () => resolve(new Error('closed without an answer')));
      });
      assert.ok(error, 'the server never answered a request without a client certificate');
      const noCert = await facilitatorClient();
      await assert.rejects(noCert.post('/settle', {}));
      await noCert.close();
    });

    it('refuses the handshake for a certificate from another CA', async () => {
      const other = await ensureDevPki(await mkdtemp(join(tmpdir(), 'other-ca-')));
      const foreign = await issueClientCert(
        { certPem: other.caCertPem, keyPem: await readFile(other.files.caKey, 'utf8') },
        'foreign',
      );
      const client = await facilitatorClient(foreign);
      await assert.rejects(client.post('/settle', {}));
      await client.close();
    });

    it('answers 403 for a valid certificate of no account, and for a deactivated account', async () => {
      const stranger = await facilitatorClient(await issueClientCert(await devCa(), 'no-account'));
      const before = await gasNonce();
      const res = await stranger.post(
        '/settle',
        settleBody(
          await signPayment(await newPayer(0n), { payTo: newPayTo(), value: 1n }),
          requirements(newPayTo(), 1n),
        ),
      );
      assert.equal(res.status, 403);
      assert.deepEqual(res.json, { error: 'forbidden' });
      await stranger.close();

      const leaving = await newAccount('leaving');
      await deactivateAccount(stack().facilitator.pool, leaving.account.id);
      const payer = await newPayer();
      const payTo = newPayTo();
      const denied = await leaving.client.post(
        '/settle',
        settleBody(await signPayment(payer, { payTo, value: 5n }), requirements(payTo, 5n)),
      );
      assert.equal(denied.status, 403);
      await leaving.client.close();
      assert.equal(await gasNonce(), before, 'nothing was sent');
    });

    it('account lookups are cached for FACILITATOR_ACCOUNT_CACHE_MS, and not at all with 0', async () => {
      const pool = stack().facilitator.pool;
      const { account, client } = await newAccount('cached-lookup');
      await client.close();
      const cached = createAccountLookup(pool, 300);
      const uncached = createAccountLookup(pool, 0);
      assert.equal((await cached(account.certFingerprint))?.active, true);
      assert.equal((await uncached(account.certFingerprint))?.active, true);
      await deactivateAccount(pool, account.id);
      assert.equal((await uncached(account.certFingerprint))?.active, false, '0: every lookup reads the table');
      // Within the cache time the remembered account answers; once it runs out, the table does.
      await until('the cached lookup to see the deactivation', async () => {
        const seen = await cached(account.certFingerprint);
        return seen?.active === false;
      });
    });

    it('answers 400 for a malformed body', async () => {
      for (const body of [
        'not json',
        '{}',
        JSON.stringify({ x402Version: 1, paymentPayload: {}, paymentRequirements: {} }),
      ]) {
        const res = await gateway.client.post('/settle', body);
        assert.equal(res.status, 400);
        assert.equal(typeof res.json.error, 'string');
      }
    });
  });

  describe('settle', () => {
    it('settles an authorization once: balances move exactly once, the record keeps hash, amount, status and attempts', async () => {
      const payer = await newPayer(1_000_000n);
      const payTo = newPayTo();
      const payment = await signPayment(payer, { payTo, value: 250_000n });
      const body = settleBody(payment, requirements(payTo, 250_000n));
      const res = await gateway.client.post('/settle', body);
      assert.equal(res.status, 200, JSON.stringify(res.json));
      assert.equal(res.json.success, true);
      assert.match(res.json.transaction, /^0x[0-9a-f]{64}$/);
      assert.equal(res.json.network, 'base');
      assert.equal(res.json.payer, payer.address);
      assert.equal(await balanceOf(provider, payTo), 250_000n);
      assert.equal(await balanceOf(provider, payer.address), 750_000n);
      const receipt = await provider.getTransactionReceipt(res.json.transaction);
      assert.equal(receipt?.status, 1);
      assert.ok(receipt!.gasUsed < 100_000n, `gas used ${receipt!.gasUsed} fits the fixed EOA limit with room`);

      const record = await finalRecord(
        stack().facilitator.pool,
        keyOf(payer.address, payment.payload.authorization.nonce),
      );
      assert.equal(record?.status, 'settled');
      assert.equal(record?.txHash, res.json.transaction);
      assert.equal(record?.amount, 250_000n);
      assert.equal(record?.attempts, 1);
      assert.equal(record?.blockNumber, receipt?.blockNumber);

      // The same authorization again: the same hash, no new transaction.
      const sent = await gasNonce();
      const again = await gateway.client.post('/settle', body);
      assert.equal(again.status, 200);
      assert.deepEqual(again.json, res.json);
      assert.equal(await gasNonce(), sent);
      assert.equal(await balanceOf(provider, payTo), 250_000n);

      // Operators find it in Temporal by its deterministic id, with its search attributes (set as
      // the run closes, which may be just after the answer: the record answers first).
      const handle = stack().temporal.workflow.getHandle(keyOf(payer.address, payment.payload.authorization.nonce));
      assert.equal((await handle.result()).status, 'settled');
      const description = await handle.describe();
      assert.equal(description.type, 'SettlementWorkflow');
      assert.equal(description.searchAttributes.SettlementStatus?.[0], 'settled');
      // Both in lowercase hex, like the workflow id: a Web UI query typed in lowercase finds them.
      assert.equal(description.searchAttributes.TxHash?.[0], res.json.transaction.toLowerCase());
      assert.equal(description.searchAttributes.Payer?.[0], payer.address.toLowerCase());
      assert.notEqual(payer.address, payer.address.toLowerCase(), 'the payer address is checksummed (mixed case)');
      const query = `Payer = '${payer.address.toLowerCase()}' AND TxHash = '${res.json.transaction.toLowerCase()}'`;
      const found = await waitFor(
        async () => {
          const ids: string[] = [];
          for await (const w of stack().temporal.workflow.list({ query })) ids.push(w.workflowId);
          return ids.length ? ids : null;
        },
        { timeoutMs: 10_000, everyMs: 200, what: 'the workflow in the visibility store' },
      );
      assert.deepEqual(found, [handle.workflowId]);
      const history = JSON.stringify(
        await stack()
          .temporal.workflow.getHandle(keyOf(payer.address, payment.payload.authorization.nonce))
          .fetchHistory(),
      );
      assert.ok(
        !history.includes(payment.payload.signature.slice(2)),
        'the signature never enters the workflow history',
      );
    });

    it('50 concurrent /settle of one authorization give one transaction and one hash', async () => {
      const payer = await newPayer(1_000_000n);
      const payTo = newPayTo();
      const body = settleBody(await signPayment(payer, { payTo, value: 100_000n }), requirements(payTo, 100_000n));
      const before = await gasNonce();
      const replies = await Promise.all(Array.from({ length: 50 }, () => gateway.client.post('/settle', body)));
      for (const r of replies) assert.equal(r.status, 200, JSON.stringify(r.json));
      const hashes = new Set(replies.map((r) => r.json.transaction));
      assert.equal(hashes.size, 1);
      assert.ok(replies.every((r) => r.json.success === true));
      assert.equal(await gasNonce(), before + 1, 'exactly one transaction from the gas wallet');
      const transfers = await transfersTo(provider, payTo);
      assert.deepEqual(transfers, [{ hash: [...hashes][0], value: 100_000n }]);
    });

    it('answers collection outcomes with success false and one coarse reason, keeping the precise cause', async () => {
      const payTo = newPayTo();
      const rich = await newPayer(1_000_000n);
      const poor = await newPayer(10n);
      const now = Math.floor(Date.now() / 1000);
      const cases: Array<{
        name: string;
        payer: typeof rich;
        payment: Awaited<ReturnType<typeof signPayment>>;
        reqs: ReturnType<typeof requirements>;
        cause: string | null;
      }> = [
        {
          name: 'insufficient balance',
          payer: poor,
          payment: await signPayment(poor, { payTo, value: 1_000n }),
          reqs: requirements(payTo, 1_000n),
          cause: 'insufficient_balance',
        },
        {
          name: 'expired',
          payer: rich,
          payment: await signPayment(rich, { payTo, value: 1_000n, validBefore: now - 1 }),
          reqs: requirements(payTo, 1_000n),
          cause: 'expired',
        },
        {
          name: 'not yet valid',
          payer: rich,
          payment: await signPayment(rich, { payTo, value: 1_000n, validAfter: now + 3600 }),
          reqs: requirements(payTo, 1_000n),
          cause: 'not_yet_valid',
        },
      ];
      // Requirements that do not match the authorization: the same answer, and nothing claimed
      // or recorded, so they cannot poison the authorization for a submission with the right ones.
      const mismatches = [
        {
          name: 'recipient mismatch',
          payment: await signPayment(rich, { payTo: newPayTo(), value: 1_000n }),
          reqs: requirements(payTo, 1_000n),
        },
        {
          name: 'over maxAmountRequired',
          payment: await signPayment(rich, { payTo, value: 2_000n }),
          reqs: requirements(payTo, 1_000n),
        },
        {
          name: 'wrong asset',
          payment: await signPayment(rich, { payTo, value: 1_000n }),
          reqs: requirements(payTo, 1_000n, { asset: newPayTo() }),
        },
        {
          name: 'wrong network',
          payment: { ...(await signPayment(rich, { payTo, value: 1_000n })), network: 'base-sepolia' },
          reqs: requirements(payTo, 1_000n, { network: 'base-sepolia' }),
        },
      ];
      // A consumed nonce: the payer spends it directly first (gas paid by a dev account).
      const used = await signPayment(rich, { payTo, value: 1_000n });
      {
        const submitter = new Wallet(DEV_ACCOUNTS[4].privateKey, provider);
        const a = used.payload.authorization;
        const tx = await tokenContract(stack().infra.tokenAddress, submitter)[
          'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)'
        ](a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, used.payload.signature);
        await tx.wait();
      }
      cases.push({
        name: 'consumed nonce',
        payer: rich,
        payment: used,
        reqs: requirements(payTo, 1_000n),
        cause: 'nonce_used',
      });

      const before = await gasNonce();
      for (const c of cases) {
        const res = await gateway.client.post('/settle', settleBody(c.payment, c.reqs));
        assert.equal(res.status, 200, `${c.name}: ${JSON.stringify(res.json)}`);
        assert.equal(res.json.success, false, c.name);
        assert.equal(res.json.errorReason, 'settlement_failed', c.name);
        assert.equal(res.json.transaction, undefined, c.name);
        const record = await findSettlement(
          stack().facilitator.pool,
          keyOf(c.payer.address, c.payment.payload.authorization.nonce),
        );
        assert.equal(record?.status, 'failed', c.name);
        assert.equal(record?.failureCause, c.cause, c.name);
        // The workflow is started once the outcome is known (the outbox): it may trail the answer by moments.
        const handle = stack().temporal.workflow.getHandle(
          keyOf(c.payer.address, c.payment.payload.authorization.nonce),
        );
        await until('the settlement workflow', () =>
          handle.describe().then(
            () => true,
            () => false,
          ),
        );
        await handle.result();
        const description = await handle.describe();
        assert.equal(description.searchAttributes.SettlementStatus?.[0], 'failed', c.name);
        assert.equal(description.searchAttributes.ErrorClass?.[0], c.cause, c.name);
      }
      for (const m of mismatches) {
        const res = await gateway.client.post('/settle', settleBody(m.payment, m.reqs));
        assert.equal(res.status, 200, `${m.name}: ${JSON.stringify(res.json)}`);
        assert.deepEqual(
          [res.json.success, res.json.errorReason, res.json.transaction],
          [false, 'settlement_failed', undefined],
          m.name,
        );
        assert.equal(
          await findSettlement(stack().facilitator.pool, keyOf(rich.address, m.payment.payload.authorization.nonce)),
          null,
          m.name,
        );
      }
      assert.equal(await gasNonce(), before, 'no collection failure spent gas');

      // A forged signature is refused before any workflow or record exists.
      const forged = await signPayment(rich, { payTo, value: 1_000n });
      forged.payload.authorization.value = '999';
      const res = await gateway.client.post('/settle', settleBody(forged, requirements(payTo, 1_000n)));
      assert.equal(res.status, 200);
      assert.deepEqual(Object.keys(res.json).sort(), ['errorReason', 'network', 'payer', 'success']);
      assert.equal(res.json.errorReason, 'settlement_failed');
      assert.equal(
        await findSettlement(stack().facilitator.pool, keyOf(rich.address, forged.payload.authorization.nonce)),
        null,
      );
    });
  });

  describe('guardrails', () => {
    it("429 for a kind outside the account's allowed set, before any claim", async () => {
      const other = await newAccount('kinds-other-asset', { kinds: [{ network: 'base', asset: newPayTo() }] });
      const payer = await newPayer();
      const payTo = newPayTo();
      const payment = await signPayment(payer, { payTo, value: 1_000n });
      const before = await gasNonce();
      const res = await other.client.post('/settle', settleBody(payment, requirements(payTo, 1_000n)));
      assert.equal(res.status, 429);
      assert.equal(typeof res.json.error, 'string');
      assert.equal(
        await findSettlement(stack().facilitator.pool, keyOf(payer.address, payment.payload.authorization.nonce)),
        null,
        'no nonce claim',
      );
      assert.equal(await gasNonce(), before);
      await other.client.close();
    });

    it('429 over the per-transaction maximum (account override and deployment default)', async () => {
      const capped = await newAccount('per-tx-cap', { maxPerTx: 5_000n });
      const payer = await newPayer();
      const payTo = newPayTo();
      const over = await signPayment(payer, { payTo, value: 5_001n });
      assert.equal((await capped.client.post('/settle', settleBody(over, requirements(payTo, 5_001n)))).status, 429);
      assert.equal(
        await findSettlement(stack().facilitator.pool, keyOf(payer.address, over.payload.authorization.nonce)),
        null,
      );
      const within = await signPayment(payer, { payTo, value: 5_000n });
      const ok = await capped.client.post('/settle', settleBody(within, requirements(payTo, 5_000n)));
      assert.equal(ok.json.success, true);

      const defaultMax = stack().facilitator.config.guardrails.maxPerTx;
      const whale = await newPayer(defaultMax + 10n);
      const big = await signPayment(whale, { payTo, value: defaultMax + 1n });
      assert.equal(
        (await gateway.client.post('/settle', settleBody(big, requirements(payTo, defaultMax + 1n)))).status,
        429,
      );
      await capped.client.close();
    });

    it('429 over the daily ceiling; concurrent settles cannot overshoot it', async () => {
      const ceiling = 10_000n;
      const daily = await newAccount('daily-ceiling', { dailyCeiling: ceiling });
      const payTo = newPayTo();
      // Funded one after another: concurrent mints from anvil's unlocked dev account can race on its nonce.
      const payers = [];
      for (let i = 0; i < 8; i++) payers.push(await newPayer(100_000n));
      // 8 payments of 3000 against a ceiling of 10000: at most 3 fit.
      const bodies = await Promise.all(
        payers.map(async (p) =>
          settleBody(await signPayment(p, { payTo, value: 3_000n }), requirements(payTo, 3_000n)),
        ),
      );
      const replies = await Promise.all(bodies.map((b) => daily.client.post('/settle', b)));
      const settled = replies.filter((r) => r.status === 200 && r.json.success);
      const limited = replies.filter((r) => r.status === 429);
      assert.equal(settled.length, 3, JSON.stringify(replies.map((r) => r.status)));
      assert.equal(limited.length, 5);
      assert.equal(await balanceOf(provider, payTo), 9_000n);
      const { rows } = await stack().facilitator.pool.query('select reserved from daily_usage where account_id = $1', [
        daily.account.id,
      ]);
      assert.equal(rows[0].reserved, '9000');
      await daily.client.close();
    });

    it('a payment refused by re-verification takes nothing from the daily ceiling', async () => {
      const daily = await newAccount('daily-release', { dailyCeiling: 5_000n });
      const payTo = newPayTo();
      const poor = await newPayer(0n);
      const res = await daily.client.post(
        '/settle',
        settleBody(await signPayment(poor, { payTo, value: 5_000n }), requirements(payTo, 5_000n)),
      );
      assert.equal(res.json.success, false);
      const payer = await newPayer();
      const ok = await daily.client.post(
        '/settle',
        settleBody(await signPayment(payer, { payTo, value: 5_000n }), requirements(payTo, 5_000n)),
      );
      assert.equal(ok.json.success, true, 'the full ceiling is still available');
      await daily.client.close();
    });
  });

  describe('readiness', () => {
    it('answers 503 (healthz and /settle) with the gas wallet below the low-water mark, and recovers', async () => {
      const wallet = stack().facilitator.gasWallet;
      const saved = await provider.getBalance(wallet);
      await provider.send('anvil_setBalance', [wallet, toQuantity(stack().facilitator.config.gasLowWaterWei - 1n)]);
      try {
        const health = await request(`${stack().facilitator.publicUrl}/healthz?ready=1`);
        assert.equal(health.statusCode, 503);
        assert.deepEqual(await health.body.json(), { status: 'not_ready', checks: { rpc: true, gas_balance: false } });
        const payer = await newPayer();
        const payTo = newPayTo();
        const res = await gateway.client.post(
          '/settle',
          settleBody(await signPayment(payer, { payTo, value: 1_000n }), requirements(payTo, 1_000n)),
        );
        assert.equal(res.status, 503);
        assert.ok(res.headers['retry-after']);
        assert.equal(await balanceOf(provider, payTo), 0n);
      } finally {
        await provider.send('anvil_setBalance', [
          wallet,
          toQuantity(saved > parseEther('1') ? saved : parseEther('100')),
        ]);
      }
      // The open probe answers from a result at most 1 s old (PUBLIC_PROBE_INTERVAL_MS).
      await waitFor(
        async () => {
          const health = await request(`${stack().facilitator.publicUrl}/healthz?ready=1`);
          await health.body.dump();
          return health.statusCode === 200;
        },
        { timeoutMs: 3_000, what: 'the open probe to answer 200' },
      );
    });

    it('the open probe checks the RPC at most once a second however often it is asked, and never changes what /settle reads', async () => {
      const calls: string[] = [];
      const counting = new Proxy(provider, {
        get(target, prop, receiver) {
          if (prop === 'getBalance')
            return (...args: unknown[]) => (
              calls.push('getBalance'),
              (target.getBalance as (...a: unknown[]) => unknown)(...args)
            );
          return Reflect.get(target, prop, receiver);
        },
      });
      const readiness = createReadiness({
        provider: counting,
        gasWallet: stack().facilitator.gasWallet,
        lowWaterWei: 1n,
        cacheMs: 60_000,
      });
      const settleView = await readiness.current();
      assert.equal(settleView.ready, true);
      const before = calls.length;
      const reports = await Promise.all(Array.from({ length: 100 }, () => readiness.probe()));
      assert.ok(reports.every((r) => r.ready));
      assert.ok(calls.length - before <= 1, `${calls.length - before} RPC checks for 100 probes`);
      // What /settle reads is its own: served from its cache, not re-measured by the probes.
      const afterProbes = calls.length;
      assert.equal((await readiness.current()).ready, true);
      assert.equal(calls.length, afterProbes, '/settle read its cached state');
    });
  });
});
