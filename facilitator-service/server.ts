// Starts the facilitator's two listeners on their dependencies (used by facilitator-service/main.ts
// and by the test stack): HTTPS with mutual TLS for /settle (a client without a certificate
// from our CA fails the handshake: requestCert + rejectUnauthorized), and plain HTTP for the
// read-only endpoints.
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { createServer as createHttpServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Client, type ConnectionLike } from '@temporalio/client';
import { NativeConnection, type WorkflowBundle } from '@temporalio/worker';
import type pg from 'pg';
import type { Logger } from '../lib/log.ts';
import { requireTlsFiles, readKeystore, type FacilitatorConfig } from '../facilitator/config.ts';
import { createMutualTlsApp, createPublicApp } from './app.ts';
import { createAccountLookup } from '../facilitator/accounts.ts';
import { createChainProvider } from '../facilitator/chain.ts';
import { createReadiness } from './readiness.ts';
import { createOutcomeListener } from '../facilitator/outcomes.ts';
import { startSweeper } from './sweeper.ts';
import type { TransactionSigner } from '../facilitator/signer.ts';
import { createFacilitatorWorker } from '../temporal/facilitator-worker.ts';
import { startWorkerVersion } from '../temporal/worker-deployment.ts';
import { temporalClientInterceptors } from '../lib/observability/tracing.ts';

export type RunningFacilitator = {
  url: string;
  publicUrl: string;
  tlsServer: HttpsServer;
  publicServer: Server;
  close(): Promise<void>;
};

function listen(server: Server | HttpsServer, port: number, host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve((server.address() as AddressInfo).port));
  });
}

export type FacilitatorStartDeps = {
  pool: pg.Pool;
  log: Logger;
  /** A Temporal client, when the workers run elsewhere (FACILITATOR_EMBEDDED_WORKER=false). */
  temporal?: Client;
  /** Called when the embedded worker fails after it started (not when it is shut down). */
  onWorkerFailure?: (err: Error) => void;
  /**
   * Runs a worker in this process. Its client then shares the worker's connection, which lets
   * /settle start workflows eagerly: the first workflow task comes back with the start call,
   * straight to this worker, instead of through the server's task queue.
   */
  worker?: { signer: TransactionSigner; workflowBundle?: WorkflowBundle };
};

async function embeddedWorker(
  config: FacilitatorConfig,
  deps: FacilitatorStartDeps,
  worker: NonNullable<FacilitatorStartDeps['worker']>,
) {
  const connection = await NativeConnection.connect({ ...config.temporal.connection });
  const provider = createChainProvider(config.chainRpcUrl, config.domain.chainId);
  const created = await createFacilitatorWorker(
    config,
    { pool: deps.pool, provider, signer: worker.signer },
    { workflowBundle: worker.workflowBundle, connection },
  );
  // Polling from here; a fresh deployment takes this worker's version as its current one. The
  // listeners do not wait for that (up to a minute when the server is slow to route the queue):
  // a settlement started before its routing settles waits a moment for it.
  const { running } = startWorkerVersion(created.worker, connection, config.temporal, deps.log);
  // A worker that fails (not one shut down) is the caller's to act on (the process entry exits).
  running.catch((err: Error) => {
    deps.log.error({ err: { name: err.name, message: err.message } }, 'the embedded facilitator worker failed');
    deps.onWorkerFailure?.(err);
  });
  const client = new Client({
    connection: connection as unknown as ConnectionLike,
    namespace: config.temporal.namespace,
    interceptors: { workflow: temporalClientInterceptors() },
  });
  return {
    client,
    fastPath: created.fastPath,
    async stop() {
      if (created.worker.getState() === 'RUNNING') created.worker.shutdown();
      await running.catch(() => undefined);
      await connection.close();
      provider.destroy();
    },
  };
}

export async function startFacilitator(
  config: FacilitatorConfig,
  deps: FacilitatorStartDeps,
): Promise<RunningFacilitator> {
  const tls = requireTlsFiles(config);
  const embedded = deps.worker ? await embeddedWorker(config, deps, deps.worker) : undefined;
  const temporal = embedded?.client ?? deps.temporal;
  if (!temporal) throw new Error('startFacilitator needs a Temporal client or an embedded worker');
  const provider = createChainProvider(config.chainRpcUrl, config.domain.chainId);
  const readiness = createReadiness({
    provider,
    gasWallet: readKeystore(config).address,
    lowWaterWei: config.gasLowWaterWei,
    cacheMs: config.readinessCacheMs,
  });
  const outcomes = await createOutcomeListener(config.databaseUrl, deps.log);
  // Every settlement gets its workflow, even when /settle could not start it (see sweeper.ts).
  const sweeper = startSweeper({ pool: deps.pool, temporal, config, log: deps.log });
  const appDeps = {
    config,
    pool: deps.pool,
    temporal,
    eagerStart: embedded !== undefined,
    fastPath: embedded?.fastPath,
    readiness,
    lookupAccount: createAccountLookup(deps.pool, config.accountCacheMs),
    chain: provider,
    outcomes,
    log: deps.log,
  };
  const tlsServer = createHttpsServer(
    {
      ...tls,
      requestCert: true,
      rejectUnauthorized: true,
    },
    createMutualTlsApp(appDeps).callback(),
  );
  const publicServer = createHttpServer(createPublicApp(appDeps).callback());
  const port = await listen(tlsServer, config.port, config.host);
  const publicPort = await listen(publicServer, config.publicPort, config.host);
  return {
    url: `https://${config.host}:${port}`,
    publicUrl: `http://${config.host}:${publicPort}`,
    tlsServer,
    publicServer,
    async close() {
      tlsServer.closeAllConnections();
      publicServer.closeAllConnections();
      await Promise.all([new Promise((r) => tlsServer.close(r)), new Promise((r) => publicServer.close(r))]);
      provider.destroy();
      await sweeper.stop();
      await outcomes.close();
      await embedded?.stop();
    },
  };
}
