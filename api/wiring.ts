// The gateway API's wiring: builds the app on its dependencies and starts its listener (used by
// api/main.ts and by the tests), and with `relay` the process's background rounds
// (temporal/gateway-jobs.ts). `shared` holds the per-process parts its caller already built;
// any missing are built for this app.
import type { Server } from 'node:http';
import { readFileSync } from 'node:fs';
import type { Client } from '@temporalio/client';
import { createApp } from './app.ts';
import type { GatewayConfig } from '../gateway/config.ts';
import type { Logger } from '../lib/log.ts';
import { cachedProbe } from '../lib/cached-probe.ts';
import { readinessChecks } from './metrics.ts';
import { createStartBacklog } from './proxy/start-backlog.ts';
import { databaseAnswers, type GatewayDb } from '../gateway/db/orm.ts';
import { startGatewayJobs } from '../temporal/gateway-jobs.ts';
import { createVaultClient } from '../gateway/credentials/vault.ts';
import { openChangeFeed } from '../gateway/db/change-feed.ts';
import type { AppDeps } from './deps.ts';

const READINESS_INTERVAL_MS = 1_000;

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
  name: string;
  version: string;
};

/**
 * `relay`: run the background rounds in this process (temporal/gateway-jobs.ts: the start relay,
 * the closed-workflow check, the analytics fold and summaries, the expired payment tasks' purge;
 * api/main.ts; tests that need them run their own).
 */
export type GatewayOptions = Partial<Pick<AppDeps, 'feed' | 'vaultClient' | 'stopping'>> & { relay?: boolean };

export async function startGateway(
  config: GatewayConfig,
  orm: GatewayDb,
  temporal: Client,
  log: Logger,
  shared: GatewayOptions = {},
): Promise<Server> {
  // A feed of this app's own lives as long as its server.
  const feed = shared.feed ?? openChangeFeed(orm);
  const startBacklog = createStartBacklog(config.startBacklog);
  const app = createApp(
    {
      config,
      orm,
      temporal,
      log,
      feed,
      vaultClient: shared.vaultClient ?? createVaultClient(config.vault),
      stopping: shared.stopping,
      version: { name: pkg.name, version: pkg.version, commit: config.gitCommit ?? null },
      // At most one database and one Temporal check per second, whatever the probe rate.
      readiness: cachedProbe(async () => {
        readinessChecks.inc();
        const [database, temporalUp] = await Promise.all([
          databaseAnswers(orm),
          temporal.workflowService.getSystemInfo({}).then(
            () => true,
            () => false,
          ),
        ]);
        return { database, temporal: temporalUp };
      }, READINESS_INTERVAL_MS),
    },
    { startBacklog },
  );
  const server = app.listen(config.port, config.host);
  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
  });
  if (!shared.feed) server.once('close', () => void feed.close());
  // Bodies may legitimately take long (32 MiB uploads); headers may not.
  server.headersTimeout = 30_000;
  server.requestTimeout = 0;
  if (shared.relay) {
    const jobs = startGatewayJobs({ config, db: orm, temporal, log, backlog: startBacklog });
    server.once('close', () => void jobs.stop());
  }
  return server;
}
