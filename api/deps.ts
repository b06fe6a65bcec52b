// What the gateway's Koa application is built from: handed to every route and stage at wiring
// time (api/app.ts), so none of them imports the app itself.
import type { Client } from '@temporalio/client';
import type { GatewayConfig } from '../gateway/config.ts';
import type { GatewayDb } from '../gateway/db/orm.ts';
import type { Logger } from '../lib/log.ts';
import type { VaultClient } from '../gateway/credentials/vault.ts';
import type { ChangeFeed } from '../gateway/db/change-feed.ts';

export type AppDeps = {
  config: GatewayConfig;
  /** The gateway's database, handed to the domain's functions (gateway/); never queried here. */
  orm: GatewayDb;
  temporal: Client;
  log: Logger;
  /** The process's change feed, which keeps the gate caches (agents, policies) current. */
  feed: ChangeFeed;
  /** The process's vault reader (its child tokens), shared with the worker when in one process. */
  vaultClient: VaultClient;
  version: { name: string; version: string; commit: string | null };
  readiness: () => Promise<{ database: boolean; temporal: boolean }>;
  /** Aborted when the process begins to stop: what holds a connection open for good (an MCP stream) ends then. */
  stopping?: AbortSignal;
};
