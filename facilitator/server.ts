// Starts the facilitator's two listeners on their dependencies (used by facilitator/main.ts
// and by the test stack): HTTPS with mutual TLS for /settle (a client without a certificate
// from our CA fails the handshake: requestCert + rejectUnauthorized), and plain HTTP for the
// read-only endpoints.
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import { createServer as createHttpServer, type Server } from 'node:http';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import type { Client } from '@temporalio/client';
import type pg from 'pg';
import type { Logger } from '../api/log.ts';
import { requireTlsFiles, gasWalletAddress, type FacilitatorConfig } from './config.ts';
import { createMutualTlsApp, createPublicApp } from './app.ts';
import { createAccountLookup } from './accounts.ts';
import { createChainProvider } from './chain.ts';
import { createReadiness } from './readiness.ts';

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

export async function startFacilitator(config: FacilitatorConfig, deps: { pool: pg.Pool; temporal: Client; log: Logger }): Promise<RunningFacilitator> {
  const tls = requireTlsFiles(config);
  const provider = createChainProvider(config.chainRpcUrl, config.domain.chainId);
  const readiness = createReadiness({
    provider,
    gasWallet: gasWalletAddress(config),
    lowWaterWei: config.gasLowWaterWei,
    cacheMs: config.readinessCacheMs,
  });
  const appDeps = {
    config,
    pool: deps.pool,
    temporal: deps.temporal,
    readiness,
    lookupAccount: createAccountLookup(deps.pool, config.accountCacheMs),
    log: deps.log,
  };
  const tlsServer = createHttpsServer(
    {
      cert: readFileSync(tls.certFile),
      key: readFileSync(tls.keyFile),
      ca: readFileSync(tls.caFile),
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
    },
  };
}
