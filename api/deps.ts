// What the gateway's Koa application is built from: handed to every route and stage at wiring
// time (api/app.ts), so none of them imports the app itself.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Client } from '@temporalio/client';
import type { GatewayConfig } from '../gateway/config.ts';
import type { Logger } from '../lib/log.ts';
import type { VaultClient } from '../gateway/credentials/vault.ts';
import type { ChangeFeed } from '../gateway/db/change-feed.ts';

export type AppDeps = {
  config: GatewayConfig;
  orm: MikroORM;
  temporal: Client;
  log: Logger;
  /** The process's change feed, which keeps the gate caches (agents, policies) current. */
  feed: ChangeFeed;
  /** The process's vault reader (its child tokens), shared with the worker when in one process. */
  vaultClient: VaultClient;
  version: { name: string; version: string; commit: string | null };
  readiness: () => Promise<{ database: boolean; temporal: boolean }>;
};
