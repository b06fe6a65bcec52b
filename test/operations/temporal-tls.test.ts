// The whole stack on a Temporal reached over mutual TLS, as a cluster behind a TLS endpoint would
// be, whose namespace has none of the project's search attributes yet: the settings come from the
// SDK's TEMPORAL_* variables (@temporalio/envconfig), the start-up check registers the missing
// attributes, a transactional call runs through to `succeeded`, and a paid call settles on the
// chain through a facilitator and its worker process on the same endpoint. The TLS endpoint is a
// real TLS terminator (node:tls, client certificates required) in front of a second dev server
// (test/support/bare-temporal.ts).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { Connection, WorkflowNotFoundError, type Client } from '@temporalio/client';
import { stack } from '../support/stack.ts';
import {
  startBareTemporal,
  customAttributes,
  startTlsTerminator,
  type TlsTerminator,
} from '../support/bare-temporal.ts';
import { ensureDevPki, type DevPki } from '../../scripts/dev/pki.ts';
import { freePort } from '../../scripts/lib/ports.ts';
import { loadGatewayConfig } from '../../gateway/config.ts';
import { loadFacilitatorConfig } from '../../facilitator/config.ts';
import { settlementKey } from '../../facilitator/store/records.ts';
import { connectClient } from '../../temporal/client.ts';
import { ensureSearchAttributes } from '../../temporal/search-attribute-setup.ts';
import { ALL_SEARCH_ATTRIBUTES } from '../../temporal/search-attributes.ts';
import { createGatewayWorker } from '../../temporal/gateway-worker.ts';
import { runWorkerVersion } from '../../temporal/worker-deployment.ts';
import { startGateway } from '../../api/wiring.ts';
import { createLogger } from '../../lib/log.ts';
import { callAt, uniqueName, waitForInvocation } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { facilitatorEnv, spawnFacilitatorWorker, startFacilitatorStack } from '../support/facilitator.ts';
import {
  CHAIN_ID,
  chainProvider,
  encodePayment,
  newAccount,
  newPayTo,
  newPayer,
  settlingTenant,
  signPayment,
  transfersTo,
} from '../support/x402.ts';

describe('Temporal over mutual TLS, on a namespace without the search attributes', function () {
  this.timeout(180_000);
  let devAddress: string;
  let pki: DevPki;
  let tls: TlsTerminator;
  const cleanups: Array<() => Promise<unknown> | unknown> = [];

  before(async () => {
    const bare = await startBareTemporal('temporal-tls-');
    cleanups.push(() => bare.stop());
    devAddress = bare.dev.address;
    pki = await ensureDevPki(join(bare.dir, 'pki'));
    tls = await startTlsTerminator(pki, devAddress);
    cleanups.push(() => tls.close());
  });
  after(async () => {
    for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => undefined);
  });

  /** Only the Temporal connection, as every process of the stack takes it. */
  function temporalTlsVariables(): Record<string, string> {
    return {
      TEMPORAL_ADDRESS: tls.address,
      TEMPORAL_NAMESPACE: 'default',
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.files.ca,
      TEMPORAL_TLS_CLIENT_CERT_PATH: pki.files.clientCert,
      TEMPORAL_TLS_CLIENT_KEY_PATH: pki.files.clientKey,
      TEMPORAL_TLS_SERVER_NAME: 'localhost',
    };
  }

  function tlsEnvironment(extra: Record<string, string> = {}): Record<string, string> {
    const s = stack();
    return {
      PORT: '0',
      DATABASE_URL: s.infra.databaseUrl,
      AUTH_JWT_SECRET: s.infra.secrets.jwtSecret,
      UPSTREAM_ALLOW: s.allow.join(','),
      VAULT_ADDR: s.infra.vault.addr,
      VAULT_TOKEN: s.infra.vault.token,
      VAULT_KEKS: `dev:${s.infra.secrets.vaultKek}`,
      TOKEN_ADDRESS: s.infra.tokenAddress,
      CHAIN_RPC_URL: s.infra.chainRpcUrl,
      SETTLEMENT_CA_FILE: s.infra.pki.files.ca,
      LOG_LEVEL: 'silent',
      TEMPORAL_TASK_QUEUE: 'gateway-tls',
      ...temporalTlsVariables(),
      ...extra,
    };
  }

  // The API and the gateway worker on the TLS connection, started once for the calls below.
  let gateway: Promise<{ api: string; client: Client }> | undefined;
  function gatewayOnTls(): Promise<{ api: string; client: Client }> {
    gateway ??= (async () => {
      const config = loadGatewayConfig(tlsEnvironment());
      const s = stack();
      const { worker, connection } = await createGatewayWorker(config, s.orm, { workflowBundle: s.workflowBundle });
      // A fresh server: the worker's version becomes the deployment's current one as it polls.
      const { running } = await runWorkerVersion(worker, connection, config.temporal, createLogger('worker', 'silent'));
      cleanups.push(async () => {
        if (worker.getState() === 'RUNNING') worker.shutdown();
        await running;
        await connection.close();
      });
      const client = await connectClient(config.temporal.connection, config.temporal.namespace);
      cleanups.push(() => client.connection.close());
      const server: Server = await startGateway(config, s.orm, client, createLogger('api', 'silent'));
      cleanups.push(
        () =>
          new Promise((r) => {
            server.closeAllConnections();
            server.close(r);
          }),
      );
      return { api: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, client };
    })();
    return gateway;
  }

  it('the settings come from TEMPORAL_*: without a client certificate the TLS endpoint refuses the connection', async () => {
    const env = tlsEnvironment();
    delete env.TEMPORAL_TLS_CLIENT_CERT_PATH;
    delete env.TEMPORAL_TLS_CLIENT_KEY_PATH;
    const config = loadGatewayConfig(env);
    assert.ok(config.temporal.connection.tls, 'TLS is on because a CA was given');
    await assert.rejects(async () => {
      const c = await Connection.connect({ ...config.temporal.connection, connectTimeout: '3 seconds' });
      try {
        await c.withDeadline(Date.now() + 3_000, () => c.workflowService.getSystemInfo({}));
      } finally {
        await c.close();
      }
    });
  });

  it('registers the missing search attributes at start, and a second (racing) start finds them there', async () => {
    assert.deepEqual(
      Object.keys(await customAttributes(devAddress)).filter((n) => ALL_SEARCH_ATTRIBUTES.some((k) => k.name === n)),
      [],
    );
    const config = loadGatewayConfig(tlsEnvironment());
    const handshakesBefore = tls.handshakes;
    const [a, b] = await Promise.all(
      [0, 1].map(async () => {
        const c = await Connection.connect({ ...config.temporal.connection });
        try {
          return await ensureSearchAttributes(c, 'default');
        } finally {
          await c.close();
        }
      }),
    );
    assert.ok(tls.handshakes > handshakesBefore, 'the calls went through the TLS endpoint');
    assert.ok(
      a.length + b.length >= ALL_SEARCH_ATTRIBUTES.length,
      'between them, the two starts registered every attribute',
    );
    const now = await customAttributes(devAddress);
    for (const key of ALL_SEARCH_ATTRIBUTES) assert.ok(now[key.name] !== undefined, `${key.name} registered`);
    const c = await Connection.connect({ ...config.temporal.connection });
    try {
      assert.deepEqual(await ensureSearchAttributes(c, 'default'), [], 'nothing left to register');
    } finally {
      await c.close();
    }
  });

  it('a transactional call through an API and a worker on that connection completes, with its search attributes set', async () => {
    const { api, client } = await gatewayOnTls();
    const upstream: TestUpstream = await startUpstream();
    cleanups.push(() => upstream.close());
    const token = await stack().token('tls-tenant');
    const created = await callAt(api, 'POST', '/v1/agents', {
      token,
      json: { name: uniqueName('tls'), upstream_url: upstream.url },
    });
    assert.equal(created.status, 201, created.text);
    const accepted = await callAt(api, 'POST', `/v1/proxy/${created.json.id}`, { token, json: { hello: 'tls' } });
    assert.equal(accepted.status, 202, accepted.text);
    const id = accepted.json.invocation_id as string;
    assert.equal((await waitForInvocation(token, created.json.id, id, 30_000, api)).status, 'succeeded');
    assert.equal(upstream.received.length, 1);
    const description = await client.workflow.getHandle(id).describe();
    assert.deepEqual(description.searchAttributes.TenantId, ['tls-tenant']);
  });

  it('a paid call settles on the chain through a facilitator and its worker process on that connection', async () => {
    const { api, client } = await gatewayOnTls();
    const s = stack();
    // The facilitator as deployed: its HTTPS process without the gas key, and its worker in a
    // process of its own (temporal/facilitator-worker-main.ts) on the `facilitator` task queue,
    // both given only the TEMPORAL_* variables to find Temporal.
    const handshakesBefore = tls.handshakes;
    const overrides = { ...temporalTlsVariables(), FACILITATOR_EMBEDDED_WORKER: 'false' };
    const facilitatorConfig = loadFacilitatorConfig(facilitatorEnv(s.infra, overrides));
    assert.equal(facilitatorConfig.temporal.taskQueue, 'facilitator');
    const facilitatorClient = await connectClient(
      facilitatorConfig.temporal.connection,
      facilitatorConfig.temporal.namespace,
    );
    cleanups.push(() => facilitatorClient.connection.close());
    const facilitator = await startFacilitatorStack(s.infra, facilitatorClient, { inProcessWorker: false, overrides });
    cleanups.push(() => facilitator.close());
    const workerMetricsPort = await freePort();
    const worker = spawnFacilitatorWorker({
      ...facilitator.env,
      FACILITATOR_WORKER_METRICS_PORT: String(workerMetricsPort),
    });
    cleanups.push(async () => {
      worker.child.kill('SIGTERM');
      await worker.exited;
    });
    await worker.ready;
    assert.ok(tls.handshakes > handshakesBefore, 'the facilitator and its worker connected through the TLS endpoint');

    const upstream: TestUpstream = await startUpstream();
    cleanups.push(() => upstream.close());
    const account = await newAccount(`tls-gateway-${randomUUID()}`);
    cleanups.push(() => account.client.close());
    const token = await settlingTenant(`tls-payer-${randomUUID()}`, account, facilitator.url);
    const payTo = newPayTo();
    const created = await callAt(api, 'POST', '/v1/agents', {
      token,
      json: {
        name: uniqueName('tls-priced'),
        upstream_url: upstream.url,
        pricing: { amount: '25000', asset: 'USDC', network: 'base', pay_to: payTo },
      },
    });
    assert.equal(created.status, 201, created.text);
    const payer = await newPayer(1_000_000n);
    const payment = await signPayment(payer, { payTo, value: 25_000n });
    const paid = await callAt(api, 'POST', `/v1/proxy/${created.json.id}`, {
      token,
      body: 'paid over tls',
      headers: { 'content-type': 'text/plain', 'x-payment': encodePayment(payment) },
    });
    assert.equal(paid.status, 202, paid.text);
    const settled = JSON.parse(Buffer.from(String(paid.headers['x-payment-response']), 'base64').toString());
    assert.equal(settled.success, true);
    assert.match(settled.transaction, /^0x[0-9a-fA-F]{64}$/);

    const done = await waitForInvocation(token, created.json.id, paid.json.invocation_id, 30_000, api);
    assert.equal(done.status, 'succeeded');
    assert.equal(done.payment_payer, payer.address);
    assert.equal(upstream.received.length, 1);
    const provider = chainProvider();
    try {
      assert.deepEqual(await transfersTo(provider, payTo), [{ hash: settled.transaction, value: 25_000n }]);
    } finally {
      provider.destroy();
    }

    // The settlement's workflow ran on the TLS-fronted server, found by its attributes in lowercase hex.
    const key = settlementKey(CHAIN_ID, s.infra.tokenAddress, payer.address, payment.payload.authorization.nonce);
    const handle = client.workflow.getHandle(key);
    assert.equal((await handle.result()).status, 'settled');
    const description = await handle.describe();
    assert.equal(description.taskQueue, 'facilitator');
    assert.deepEqual(description.searchAttributes.Payer, [payer.address.toLowerCase()]);
    assert.deepEqual(description.searchAttributes.TxHash, [settled.transaction.toLowerCase()]);
    assert.deepEqual(description.searchAttributes.SettlementStatus, ['settled']);
    await assert.rejects(
      s.temporal.workflow.getHandle(key).describe(),
      WorkflowNotFoundError,
      "not on the stack's own server",
    );

    // The separate worker's own metrics listener: its SDK's temporal_* metrics count the
    // settlement it ran, beside the gas balance gauge of the wallet it holds.
    const scrape = await fetch(`http://127.0.0.1:${workerMetricsPort}/metrics`).then((r) => r.text());
    assert.match(scrape, /^temporal_workflow_completed\{[^}]*workflow_type="SettlementWorkflow"[^}]*\} [1-9]/m);
    assert.match(scrape, /^facilitator_gas_balance_wei(\{[^}]*\})? [1-9]/m);
  });
});
