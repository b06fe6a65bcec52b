// What `npm start` checks before it starts anything: the settings of every process it will run
// (the API and the worker's, the facilitator's), read as its children will read them, with
// what npm start provides itself (the generated secret, the deployed token) standing in; every
// port variable it reads; and every listener it or its children would open (a taken port).
// All the problems come back together, one line each.
import { loadGatewayConfig } from '../../gateway/config.ts';
import { loadFacilitatorConfig } from '../../facilitator/config.ts';
import { loadRetention } from '../../temporal/retention-schedule.ts';
import { tracingSettings } from '../../lib/observability/tracing.ts';
import { gatherConfig, problemsOf, takenPorts, type Listener } from '../../lib/config.ts';

/** The ports npm start reads, their defaults, and when the process behind each is not started. */
const START_PORTS = {
  api: { variable: 'PORT', fallback: 8080, hostVariable: 'HOST' },
  facilitator: { variable: 'FACILITATOR_PORT', fallback: 8443, hostVariable: 'FACILITATOR_HOST' },
  facilitatorPublic: { variable: 'FACILITATOR_PUBLIC_PORT', fallback: 8444, hostVariable: 'FACILITATOR_HOST' },
  temporal: { variable: 'TEMPORAL_PORT', fallback: 7233, hostVariable: '', unlessSet: 'TEMPORAL_ADDRESS' },
  temporalUi: { variable: 'TEMPORAL_UI_PORT', fallback: 8233, hostVariable: '', unlessSet: 'TEMPORAL_ADDRESS' },
  postgres: { variable: 'EMBEDDED_PG_PORT', fallback: 5433, hostVariable: '', unlessSet: 'DATABASE_URL' },
  anvil: { variable: 'ANVIL_PORT', fallback: 8545, hostVariable: '', unlessSet: 'CHAIN_RPC_URL' },
  openbao: { variable: 'OPENBAO_PORT', fallback: 8200, hostVariable: '', unlessSet: 'VAULT_ADDR' },
  demo: { variable: 'DEMO_UPSTREAM_PORT', fallback: 8099, hostVariable: '' },
  apiMetrics: { variable: 'API_METRICS_PORT', fallback: 9466, hostVariable: 'METRICS_HOST' },
  workerMetrics: { variable: 'WORKER_METRICS_PORT', fallback: 9464, hostVariable: 'METRICS_HOST' },
  facilitatorMetrics: { variable: 'FACILITATOR_METRICS_PORT', fallback: 9465, hostVariable: 'METRICS_HOST' },
  facilitatorWorkerMetrics: {
    variable: 'FACILITATOR_WORKER_METRICS_PORT',
    fallback: 9467,
    hostVariable: 'METRICS_HOST',
    onlyWith: { variable: 'FACILITATOR_EMBEDDED_WORKER', value: 'false' },
  },
} satisfies Record<string, Listener & { unlessSet?: string; onlyWith?: { variable: string; value: string } }>;

export type StartPorts = Record<keyof typeof START_PORTS, number>;

/** Stands in for what npm start generates, so the children's checks can run before it exists. */
const PROVIDED = { AUTH_JWT_SECRET: 'x'.repeat(32), TOKEN_ADDRESS: `0x${'0'.repeat(40)}` };

export async function checkStartSettings(env: NodeJS.ProcessEnv): Promise<{ ports: StartPorts; problems: string[] }> {
  const problems: string[] = [];
  const badPorts: string[] = [];
  const ports = {} as StartPorts;
  for (const [key, p] of Object.entries(START_PORTS)) {
    const port = Number(env[p.variable] || p.fallback);
    ports[key as keyof StartPorts] = port;
    const metrics = p.variable.endsWith('METRICS_PORT');
    if (!Number.isInteger(port) || port < (metrics ? 0 : 1) || port > 65535)
      badPorts.push(`${p.variable} must be a port number from ${metrics ? 0 : 1} to 65535`);
  }
  const childEnv = { ...PROVIDED, ...Object.fromEntries(Object.entries(env).filter(([, v]) => v !== '')) };
  try {
    gatherConfig({
      gateway: () => loadGatewayConfig(childEnv),
      retention: () => loadRetention(childEnv),
      facilitator: () => loadFacilitatorConfig(childEnv),
      tracing: () => tracingSettings(childEnv, 'start'),
    });
  } catch (err) {
    problems.push(...problemsOf(err));
  }
  // A port the children's settings already refused is said once.
  problems.push(...badPorts.filter((line) => !problems.some((p) => p.startsWith(`${line.split(' ')[0]} `))));
  const listeners = Object.values(START_PORTS).filter(
    (p) =>
      !('unlessSet' in p && env[p.unlessSet]) && !('onlyWith' in p && env[p.onlyWith.variable] !== p.onlyWith.value),
  );
  problems.push(...(await takenPorts(listeners, env)));
  return { ports, problems };
}
