// `npm start`: the whole system on embedded defaults, as supervised child processes.
// Infrastructure first (scripts/lib/infra.ts), then the gateway worker, the facilitator, the
// API and a demo echo agent; one banner when everything answers; Ctrl-C stops it all.
import { spawn, type ChildProcess } from 'node:child_process';
import { appEnvironment, startInfra } from './lib/infra.ts';
import { waitFor } from './lib/ports.ts';
import { checkStartSettings } from './lib/start-check.ts';
import { parseCommand } from './lib/cli.ts';
import { exitWithProblems } from '../lib/config.ts';
import { stopChild } from './dev/temporal-dev-server.ts';
import { mintToken } from './lib/tokens.ts';
import { ensureDevAccount } from './dev/facilitator-account.ts';
import { dataDir as dataDirOf } from './lib/secrets.ts';
import { loadPublicUrl } from '../gateway/config.ts';
import { commitOfCheckout } from '../lib/worker-version.ts';
import { startVersioning } from './lib/start-versioning.ts';
import { loadReceiptConfig } from '../gateway/receipts/config.ts';
import { generateKey, readKeys } from '../gateway/receipts/keys.ts';
import { buildConsole, defaultConsoleDir } from './lib/console-build.ts';

/** The demo priced agent's payee: anvil's dev account 9 (any address would do). */
const DEMO_PAY_TO = '0xa0Ee7A142d267C1f36714E4a8F75612F20a79720';

parseCommand({
  usage: `usage: npm start
  Starts the whole system on embedded defaults (Temporal dev server, PostgreSQL, anvil, OpenBao,
  the worker, the facilitator, the API and a demo agent) with its data in DATA_DIR (default .data);
  prints one banner when everything answers. Ctrl-C stops it all. Settings: README.md, Configuration.`,
});

const env = process.env;
const dataDir = dataDirOf(env);
// Every setting of every process it will run, and every port, checked before anything starts.
const { ports, problems } = await checkStartSettings(env);
if (problems.length) exitWithProblems('npm start', problems);
// A receipt key folder named by RECEIPT_KEYS_DIR gets no key from the processes: npm start, the
// operator of its one machine, makes the first as `npm run receipt-keys -- init` would.
const receipts = loadReceiptConfig(env);
try {
  if (receipts.provisioned && readKeys(receipts.keysDir).length === 0) generateKey(receipts.keysDir);
} catch {
  // A key file it cannot read: the API and the worker name it in their one line at start.
}

// Where the facilitator's gas key (and its batch-settlement receiver authorizer's) lives. npm start's default runs the facilitator's worker in its
// HTTPS process (the /settle fast path, eager workflow starts); FACILITATOR_EMBEDDED_WORKER=false
// runs it as a process of its own, the only one holding the key: the production mode
// (docs/DEPLOYMENT.md).
const KEYSTORE_SECRETS = [
  'FACILITATOR_KEYSTORE_PASSWORD',
  'FACILITATOR_KEYSTORE_PASSWORD_FILE',
  'FACILITATOR_AUTHORIZER_KEYSTORE_PASSWORD',
  'FACILITATOR_AUTHORIZER_KEYSTORE_PASSWORD_FILE',
];
// The workers' deployment version rule: npm start's own on its own dev server, the production
// defaults on a Temporal named by TEMPORAL_ADDRESS (it may be shared).
const versioning = startVersioning(env);
const facilitatorMode =
  env.FACILITATOR_EMBEDDED_WORKER === 'false'
    ? {
        separated: true,
        line: 'separated worker: only the facilitator worker process holds the gas key (the production mode)',
      }
    : {
        separated: false,
        line: 'embedded worker: the HTTPS process holds the gas key (development; production runs FACILITATOR_EMBEDDED_WORKER=false, docs/DEPLOYMENT.md)',
      };

function log(source: string, line: string): void {
  for (const l of line.split('\n')) if (l.trim()) process.stdout.write(`[${source}] ${l}\n`);
}

const children: ChildProcess[] = [];
let stopping = false;
let stopInfra: () => Promise<void> = async () => undefined;

async function shutdown(code: number): Promise<never> {
  if (!stopping) {
    stopping = true;
    process.stdout.write('\nstopping...\n');
    await Promise.all(children.reverse().map((c) => stopChild(c)));
    await stopInfra();
  }
  process.exit(code);
}
process.on('SIGINT', () => void shutdown(0));
process.on('SIGTERM', () => void shutdown(0));
// A signal sent to `npm start` and its shell only (a `kill` of the npm process, a closed
// terminal whose shell forwarded nothing) never reaches this process: it would keep the whole
// system running with nobody to stop it. Losing the process that launched us is a stop too.
const launcher = process.ppid;
setInterval(() => {
  if (process.ppid !== launcher) void shutdown(0);
}, 1_000).unref();

/** Spawns a supervised child; `withheld` names variables it must not see, even inherited. */
function run(name: string, script: string, childEnv: Record<string, string>, withheld: string[] = []): ChildProcess {
  const full: NodeJS.ProcessEnv = { ...process.env, ...childEnv };
  for (const key of withheld) delete full[key];
  const child = spawn(process.execPath, [script], { env: full, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout?.on('data', (c: Buffer) => log(name, c.toString()));
  child.stderr?.on('data', (c: Buffer) => log(name, c.toString()));
  child.once('exit', (code, signal) => {
    if (stopping) return;
    process.stderr.write(`${name} exited (${signal ?? code}); stopping everything\n`);
    void shutdown(1);
  });
  children.push(child);
  return child;
}

try {
  log('start', `data folder: ${dataDir}`);
  // The web console the API serves at /console: rebuilt only when its sources changed.
  const site = await buildConsole(env.CONSOLE_DIR || defaultConsoleDir);
  log('start', `console: ${site.reused ? 'unchanged' : 'built'} in ${site.dir}`);
  const infra = await startInfra({
    dataDir,
    ports,
    postgresUrl: env.DATABASE_URL,
    databaseName: env.DATABASE_URL
      ? decodeURIComponent(new URL(env.DATABASE_URL).pathname.slice(1)) || 'gateway'
      : 'gateway',
    temporalAddress: env.TEMPORAL_ADDRESS,
    namespace: env.TEMPORAL_NAMESPACE ?? 'default',
    chainRpcUrl: env.CHAIN_RPC_URL,
    vault: env.VAULT_ADDR && env.VAULT_TOKEN ? { addr: env.VAULT_ADDR, token: env.VAULT_TOKEN } : undefined,
    persistChain: true,
    log,
  });
  stopInfra = infra.stop;
  await ensureDevAccount(infra.facilitatorDatabaseUrl, infra.pki.clientCertPem, infra.tokenAddress);

  const childEnv = appEnvironment(infra, {
    PORT: String(ports.api),
    FACILITATOR_PORT: String(ports.facilitator),
    FACILITATOR_PUBLIC_PORT: String(ports.facilitatorPublic),
    DEMO_UPSTREAM_PORT: String(ports.demo),
    // The demo echo agent and the local facilitator are on loopback: exempt exactly their
    // host:ports from the SSRF guard (upstream URLs and facilitator_url share it).
    UPSTREAM_ALLOW: env.UPSTREAM_ALLOW ?? `127.0.0.1:${ports.demo},127.0.0.1:${ports.facilitator}`,
    // A local agent refused by the SSRF guard is told which UPSTREAM_ALLOW would admit it.
    UPSTREAM_ALLOW_HINT: env.UPSTREAM_ALLOW_HINT ?? 'true',
    GIT_COMMIT: env.GIT_COMMIT ?? commitOfCheckout() ?? undefined,
    ...versioning.env,
    CONSOLE_DIR: site.dir,
    // The console's links to a workflow: this system's Temporal Web UI, unless set.
    TEMPORAL_UI_URL: env.TEMPORAL_UI_URL || infra.temporalUiUrl || undefined,
    // Readable log lines in a terminal; JSON (for a collector) otherwise.
    LOG_FORMAT: env.LOG_FORMAT ?? (process.stdout.isTTY ? 'pretty' : 'json'),
  });
  log('start', `worker versions: ${versioning.line}`);
  run('demo', 'scripts/demo-upstream.ts', childEnv);
  run('worker', 'temporal/gateway-worker-main.ts', childEnv);
  log('start', `facilitator mode: ${facilitatorMode.line}`);
  if (facilitatorMode.separated) {
    // The gas key's password goes to the facilitator's worker only: the HTTPS process that
    // faces the network cannot decrypt the keystore (it reads the wallet's address, for metrics).
    run('facilitator-worker', 'temporal/facilitator-worker-main.ts', childEnv);
    run('facilitator', 'facilitator-service/main.ts', childEnv, KEYSTORE_SECRETS);
  } else run('facilitator', 'facilitator-service/main.ts', childEnv);
  run('api', 'api/main.ts', childEnv);

  const apiUrl = `http://127.0.0.1:${ports.api}`;
  await waitFor('gateway API', async () => (await fetch(`${apiUrl}/readyz`)).ok, 90_000);
  await waitFor(
    'facilitator',
    async () => (await fetch(`http://127.0.0.1:${ports.facilitatorPublic}/healthz`)).ok,
    30_000,
  );

  const token = await mintToken({
    secret: childEnv.AUTH_JWT_SECRET,
    tenant: 'demo',
    user: 'demo-user',
    ttl: '24h',
    tenantClaim: env.AUTH_TENANT_CLAIM,
    userClaim: env.AUTH_USER_CLAIM,
    issuer: env.AUTH_ISSUER,
    audience: env.AUTH_AUDIENCE,
  });
  const demoUrl = `http://127.0.0.1:${ports.demo}/`;
  const publicUrl = loadPublicUrl(env);
  const publicLine = publicUrl
    ? `${publicUrl}  (PUBLIC_URL: x402 challenges name it)`
    : env.TRUST_PROXY === 'true'
      ? 'from X-Forwarded-Proto / X-Forwarded-Host (TRUST_PROXY=true)'
      : `${apiUrl}  (the request's own address; set PUBLIC_URL behind a load balancer)`;
  process.stdout.write(`
================================================================================
 Agent gateway is up
   API           ${apiUrl}        (GET /healthz, /readyz, /version; /v1 with a bearer token)
   API reference ${apiUrl}/docs   (OpenAPI document: ${apiUrl}/v1/openapi.json; docs/API.md)
   Console       ${apiUrl}/console   (sign in with the demo token below; docs/CONSOLE.md)
   Public URL    ${publicLine}
   Facilitator   https://127.0.0.1:${ports.facilitator}  (mutual TLS: /settle)   http://127.0.0.1:${ports.facilitatorPublic} (/supported, /healthz)
                 ${facilitatorMode.line}
   Temporal UI   ${infra.temporalUiUrl ?? '(external Temporal: ' + infra.temporalAddress + ')'}
   Versions      ${versioning.line}
   Chain         ${infra.chainRpcUrl} (chain id 8453), USDC token ${infra.tokenAddress}
   Data folder   ${dataDir}

 Demo tenant token (24 h; more with: npm run token -- --tenant T --user U):
   export TOKEN=${token}

 Create an agent and invoke it:
   AGENT=$(curl -s -X POST ${apiUrl}/v1/agents -H "Authorization: Bearer $TOKEN" \\
     -H 'content-type: application/json' -d '{"name":"echo-'$RANDOM'","upstream_url":"${demoUrl}"}' \\
     | sed -E 's/.*"id":"([^"]+)".*/\\1/')
   INV=$(curl -s -X POST ${apiUrl}/v1/proxy/$AGENT -H "Authorization: Bearer $TOKEN" -d 'hello' \\
     | sed -E 's/.*"invocation_id":"([^"]+)".*/\\1/')
   sleep 1; curl -s ${apiUrl}/v1/proxy/$AGENT/invocations/$INV -H "Authorization: Bearer $TOKEN"

 A priced agent (0.01 USDC a call): unpaid calls answer 402 with an x402 challenge
 (docs/SETTLEMENT.md; fund a payer with: npm run dev -- fund ADDRESS):
   PRICED=$(curl -s -X POST ${apiUrl}/v1/agents -H "Authorization: Bearer $TOKEN" \\
     -H 'content-type: application/json' -d '{"name":"priced-'$RANDOM'","upstream_url":"${demoUrl}",
     "pricing":{"amount":"10000","asset":"USDC","network":"base","pay_to":"${DEMO_PAY_TO}"}}' \\
     | sed -E 's/.*"id":"([^"]+)".*/\\1/')
   curl -s -X POST ${apiUrl}/v1/proxy/$PRICED -H "Authorization: Bearer $TOKEN" -d 'hello'

 An A2A agent (the demo agent also speaks A2A at ${demoUrl}a2a, one skill: echo; docs/API.md "A2A agents"):
   A2A=$(curl -s -X POST ${apiUrl}/v1/agents -H "Authorization: Bearer $TOKEN" \
     -H 'content-type: application/json' -d '{"name":"a2a-'$RANDOM'","protocol":"a2a","upstream_url":"${demoUrl}a2a"}' \
     | sed -E 's/.*"id":"([^"]+)".*/\\1/')
   curl -s ${apiUrl}/v1/proxy/$A2A/.well-known/agent-card.json -H "Authorization: Bearer $TOKEN"
   TEXT=hello npm run example:a2a-client -- $A2A

 Ctrl-C stops everything; the next npm start reuses ${dataDir}.
================================================================================
`);
} catch (err) {
  process.stderr.write(`npm start failed: ${(err as Error).message}\n`);
  await shutdown(1);
}
