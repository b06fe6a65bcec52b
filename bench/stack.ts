// The stack the proxy and throughput benchmarks run against, set up the same way for both:
// infrastructure as for the tests (a fresh database on the local PostgreSQL when there is one),
// the gateway's environment (limits opened wide, quiet logs), one tenant and one agent.
import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { request } from 'undici';
import { startInfra, appEnvironment, freeInfraPorts, type Infra } from '../scripts/lib/infra.ts';
import { freePort, waitFor } from '../scripts/lib/ports.ts';
import { canConnect, dropDatabase } from '../scripts/lib/postgres.ts';
import { mintToken } from '../scripts/lib/tokens.ts';
import { timedStep } from '../scripts/lib/progress.ts';

export async function startBenchInfra(name: string, dataDir: string, opts: { redis?: boolean } = {}): Promise<Infra> {
  const local = 'postgres://postgres@127.0.0.1:5432/postgres';
  return timedStep(
    `${name}: starting the stack`,
    `Temporal dev server, PostgreSQL, anvil and the token, OpenBao${opts.redis ? ', Redis' : ''}`,
    async () =>
      startInfra({
        dataDir,
        ports: { ...(await freeInfraPorts()), ...(opts.redis ? { redis: await freePort() } : {}) },
        postgresUrl: process.env.DATABASE_URL ?? ((await canConnect(local)) ? local : undefined),
        databaseName: `gw_bench_${name}_${process.pid}`,
        namespace: 'default',
        persistChain: false,
        log: () => undefined,
      }),
  );
}

export async function removeBenchInfra(infra: Infra | undefined, dataDir: string): Promise<void> {
  if (infra) {
    await infra.stop();
    await dropDatabase(infra.databaseUrl).catch(() => undefined);
    await dropDatabase(infra.facilitatorDatabaseUrl).catch(() => undefined);
  }
  rmSync(dataDir, { recursive: true, force: true });
}

/** The environment of the gateway's API and worker processes. */
export function gatewayEnvironment(infra: Infra, apiPort: number): NodeJS.ProcessEnv {
  return {
    ...process.env,
    ...appEnvironment(infra, {
      PORT: String(apiPort),
      UPSTREAM_ALLOW: '127.0.0.1',
      UPSTREAM_TIMEOUT_MS: '60000',
      // The benches measure the gateway, not the limiter's refusals.
      RATE_LIMIT_GLOBAL_RPS: '1000000000',
      RATE_LIMIT_GLOBAL_BURST: '1000000000',
      RATE_LIMIT_AGENT_MAX_RPS: '100000',
      RATE_LIMIT_AGENT_MAX_BURST: '100000',
      WORKER_METRICS_PORT: '0',
      API_METRICS_PORT: '0',
      LOG_LEVEL: 'warn',
    }),
  };
}

/**
 * Waits for the API, then creates a tenant's token and an agent on `upstreamUrl`/agent with its
 * own limit opened wide (`fields` added to its representation: an MCP agent's protocol).
 */
export async function createBenchAgent(
  apiUrl: string,
  infra: Infra,
  upstreamUrl: string,
  fields: Record<string, unknown> = {},
): Promise<{ tenant: string; auth: { authorization: string }; agent: { id: string } }> {
  await waitFor('gateway API', async () => (await request(`${apiUrl}/healthz`)).statusCode === 200, 60_000);
  const tenant = `bench-${randomUUID()}`;
  const token = await mintToken({ secret: infra.secrets.jwtSecret, tenant, user: 'bench' });
  const auth = { authorization: `Bearer ${token}` };
  const created = await request(`${apiUrl}/v1/agents`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({
      name: `bench-${randomUUID()}`,
      upstream_url: `${upstreamUrl}/agent`,
      rate_limit_rps: 100_000,
      rate_limit_burst: 100_000,
      ...fields,
    }),
  });
  const agent = (await created.body.json()) as { id: string };
  if (created.statusCode !== 201) throw new Error(`agent create answered ${created.statusCode}`);
  return { tenant, auth, agent };
}

/**
 * A hard budget of the tenant whose `auth` this is, over all its calls, so wide it never refuses
 * (10^15 calls a month): every call then takes the budget stage's whole path (docs/API.md
 * "Budgets"), its reservation and the reconciliation after it.
 */
export async function createBenchBudget(apiUrl: string, auth: { authorization: string }): Promise<void> {
  const created = await request(`${apiUrl}/v1/budgets`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ name: `bench-${randomUUID()}`, limit: { calls: 1e15 }, window: 'month', mode: 'hard' }),
  });
  await created.body.dump();
  if (created.statusCode !== 201) throw new Error(`budget create answered ${created.statusCode}`);
}
