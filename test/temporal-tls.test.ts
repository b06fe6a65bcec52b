// The gateway on a Temporal reached over mutual TLS, as a cluster behind a TLS endpoint would be,
// whose namespace has none of the project's search attributes yet: the settings come from the
// SDK's TEMPORAL_* variables (@temporalio/envconfig), the start-up check registers the missing
// attributes, and a transactional call runs through to `succeeded`. The TLS endpoint is a real
// TLS terminator (node:tls, client certificates required) in front of a second dev server.
import assert from 'node:assert/strict';
import { connect as netConnect } from 'node:net';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:tls';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { Connection } from '@temporalio/client';
import { stack } from './support/stack.ts';
import { startTemporalDevServer, type DevServer } from '../scripts/dev/temporal-dev-server.ts';
import { ensureTool } from '../scripts/lib/tools.ts';
import { freePort } from '../scripts/lib/ports.ts';
import { ensureDevPki, type DevPki } from '../scripts/dev/pki.ts';
import { loadGatewayConfig } from '../gateway/config.ts';
import { connectClient } from '../temporal/client.ts';
import { ensureSearchAttributes } from '../temporal/search-attribute-setup.ts';
import { ALL_SEARCH_ATTRIBUTES } from '../temporal/search-attributes.ts';
import { createGatewayWorker } from '../temporal/gateway-worker.ts';
import { runWorkerVersion } from '../temporal/worker-deployment.ts';
import { startGateway } from '../api/gateway.ts';
import { createLogger } from '../lib/log.ts';
import { callAt } from './support/http.ts';
import { startUpstream, type TestUpstream } from './support/upstream.ts';

async function startTlsTerminator(
  pki: DevPki,
  target: string,
): Promise<{ address: string; handshakes: number; close(): void }> {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  const state = { handshakes: 0 };
  const server: TlsServer = createTlsServer(
    {
      cert: pki.serverCertPem,
      key: pki.serverKeyPem,
      ca: pki.caCertPem,
      requestCert: true,
      rejectUnauthorized: true,
      ALPNProtocols: ['h2'],
    },
    (client) => {
      state.handshakes += 1;
      const upstream = netConnect(port, host);
      client.pipe(upstream).pipe(client);
      for (const s of [client, upstream])
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
    },
  );
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    get handshakes() {
      return state.handshakes;
    },
    close: () => server.close(),
  };
}

describe('Temporal over mutual TLS, on a namespace without the search attributes', function () {
  this.timeout(180_000);
  let dev: DevServer;
  let pki: DevPki;
  let tls: Awaited<ReturnType<typeof startTlsTerminator>>;
  const cleanups: Array<() => Promise<unknown> | unknown> = [];

  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'temporal-tls-'));
    dev = await startTemporalDevServer({
      binary: ensureTool('temporal'),
      dbFile: join(dir, 'temporal.db'),
      port: await freePort(),
      namespace: 'default',
      searchAttributes: false,
    });
    cleanups.push(() => dev.stop());
    pki = await ensureDevPki(join(dir, 'pki'));
    tls = await startTlsTerminator(pki, dev.address);
    cleanups.push(() => tls.close());
  });
  after(async () => {
    for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => undefined);
  });

  async function customAttributes(): Promise<Record<string, unknown>> {
    const plain = await Connection.connect({ address: dev.address });
    try {
      return (await plain.operatorService.listSearchAttributes({ namespace: 'default' })).customAttributes ?? {};
    } finally {
      await plain.close();
    }
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
      LOG_LEVEL: 'silent',
      TEMPORAL_ADDRESS: tls.address,
      TEMPORAL_NAMESPACE: 'default',
      TEMPORAL_TASK_QUEUE: 'gateway-tls',
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.files.ca,
      TEMPORAL_TLS_CLIENT_CERT_PATH: pki.files.clientCert,
      TEMPORAL_TLS_CLIENT_KEY_PATH: pki.files.clientKey,
      TEMPORAL_TLS_SERVER_NAME: 'localhost',
      ...extra,
    };
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
      Object.keys(await customAttributes()).filter((n) => ALL_SEARCH_ATTRIBUTES.some((k) => k.name === n)),
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
    const now = await customAttributes();
    for (const key of ALL_SEARCH_ATTRIBUTES) assert.ok(now[key.name] !== undefined, `${key.name} registered`);
    const c = await Connection.connect({ ...config.temporal.connection });
    try {
      assert.deepEqual(await ensureSearchAttributes(c, 'default'), [], 'nothing left to register');
    } finally {
      await c.close();
    }
  });

  it('a transactional call through an API and a worker on that connection completes, with its search attributes set', async () => {
    const config = loadGatewayConfig(tlsEnvironment());
    const s = stack();
    const upstream: TestUpstream = await startUpstream();
    cleanups.push(() => upstream.close());
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
    const api = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

    const token = await s.token('tls-tenant');
    const created = await callAt(api, 'POST', '/v1/agents', {
      token,
      json: { name: `tls-${Date.now()}`, upstream_url: upstream.url },
    });
    assert.equal(created.status, 201, created.text);
    const accepted = await callAt(api, 'POST', `/v1/proxy/${created.json.id}`, { token, json: { hello: 'tls' } });
    assert.equal(accepted.status, 202, accepted.text);
    const id = accepted.json.invocation_id as string;
    const deadline = Date.now() + 30_000;
    let status = 'pending';
    while (Date.now() < deadline) {
      const poll = await callAt(api, 'GET', `/v1/proxy/${created.json.id}/invocations/${id}`, { token });
      status = poll.json?.status;
      if (status === 'succeeded' || status === 'failed') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(status, 'succeeded');
    assert.equal(upstream.received.length, 1);
    const description = await client.workflow.getHandle(id).describe();
    assert.deepEqual(description.searchAttributes.TenantId, ['tls-tenant']);
  });
});
