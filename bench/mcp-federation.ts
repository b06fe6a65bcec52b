// `npm run bench:mcp-federation [-- --calls 500 --rounds 5]`
//
// What a virtual MCP server adds to a tool call: the unmodified MCP SDK client calls the same
// tool of the same MCP member (bench/mcp-upstream.ts, its own process) through the gateway
// directly (POST /v1/proxy/{member}/stream) and through a virtual MCP server federating it
// (POST /v1/mcp-servers/{id}/mcp: the client's session found, the call routed to the member's
// streaming endpoint and its answer relayed), one call at a time, the two interleaved call by
// call in each round so drift hits both alike. Reports the p50 and p99 of each, what the
// federation adds at p50 and the ratio; target: it adds at most 1 ms at p50. Then where the CPU
// goes: a block of direct calls in a row, then a block of federated ones, each process's CPU
// per call (/proc: the gateway API, the member, the database's backends, this process).
// `npm run bench` (bench/run.ts) puts its result in docs/BENCHMARKS.md.
import type { ChildProcess } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Infra } from '../scripts/lib/infra.ts';
import { freePort } from '../scripts/lib/ports.ts';
import { parseCommand } from '../scripts/lib/cli.ts';
import { timedStep } from '../scripts/lib/progress.ts';
import { fmtMs, say } from './print.ts';
import { listeningPort, spawnInto, stopChildren } from './processes.ts';
import { finishResult, percentile, runAsMain, startResult, tableLines, type BenchResult } from './result.ts';
import { createBenchAgent, gatewayEnvironment, removeBenchInfra, startBenchInfra } from './stack.ts';
import { cpuCell, cpuPerUnit, type CpuGroups } from './cpu.ts';
import { databaseBackends, type DatabaseBackends } from './database-cpu.ts';

const USAGE = `usage: npm run bench:mcp-federation [-- --calls 500 --rounds 5 --json FILE]
  A tool call through a virtual MCP server against the same call on the member directly,
  interleaved, one at a time (docs/BENCHMARKS.md, "MCP federation"); --json writes the result to FILE.`;

/** What the federation may add to a call at p50. */
const TARGET_ADDED_MS = 1;

async function connect(url: string, authorization: string): Promise<Client> {
  const client = new Client({ name: 'bench', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization } } }),
  );
  return client;
}

async function timedCall(client: Client, name: string): Promise<number> {
  const t0 = performance.now();
  const answer = await client.callTool({ name, arguments: { text: 'bench' } });
  const ms = performance.now() - t0;
  if (answer.isError) throw new Error(`${name} answered an error: ${JSON.stringify(answer.content)}`);
  return ms;
}

export async function runMcpFederationBench(argv: string[] = []): Promise<BenchResult> {
  const startedMs = performance.now();
  const { values: args } = parseCommand({
    usage: USAGE,
    args: argv,
    options: { calls: { type: 'string', default: '500' }, rounds: { type: 'string', default: '5' } },
  });
  const CALLS = Number(args.calls);
  const ROUNDS = Number(args.rounds);
  const setup = `${ROUNDS} rounds × ${CALLS} calls of each, interleaved, one at a time, the MCP SDK client on both`;
  const command = `npm run bench:mcp-federation -- ${argv.join(' ')}`.trim().replace(/ --$/, '');
  const result = startResult('mcp-federation', command, setup);
  const children: ChildProcess[] = [];
  const dataDir = join(tmpdir(), `gw-bench-mcp-federation-${process.pid}`);
  let infra: Infra | undefined;
  const clients: Client[] = [];
  let database: DatabaseBackends | undefined;
  try {
    say(`# MCP federation benchmark: ${setup}`);
    infra = await startBenchInfra('mcp-federation', dataDir);
    const upstream = spawnInto(children, ['bench/mcp-upstream.ts']);
    const upstreamUrl = `http://127.0.0.1:${await listeningPort(upstream)}`;
    const apiPort = await freePort();
    const gateway = spawnInto(children, ['api/main.ts'], gatewayEnvironment(infra, apiPort));
    gateway.stderr!.on('data', (d: Buffer) => process.stderr.write(`[gateway] ${d}`));
    const apiUrl = `http://127.0.0.1:${apiPort}`;
    const { auth, agent } = await createBenchAgent(apiUrl, infra, upstreamUrl, {
      protocol: 'mcp',
      mcp_transport: 'streamable_http',
    });
    const created = await request(`${apiUrl}/v1/mcp-servers`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'bench', members: [{ agent_id: agent.id, prefix: 'm' }] }),
    });
    const server = (await created.body.json()) as { mcp_url: string };
    if (created.statusCode !== 201) throw new Error(`virtual MCP server create answered ${created.statusCode}`);

    const direct = await connect(`${apiUrl}/v1/proxy/${agent.id}/stream`, auth.authorization);
    const federated = await connect(server.mcp_url, auth.authorization);
    clients.push(direct, federated);
    const targets = [
      { name: 'direct (/v1/proxy/{member}/stream)', client: direct, tool: 'echo', ms: [] as number[] },
      { name: 'federated (/v1/mcp-servers/{id}/mcp)', client: federated, tool: 'm_echo', ms: [] as number[] },
    ];
    await timedStep('mcp-federation: warm-up', '200 calls of each', async () => {
      for (let i = 0; i < 200; i++) for (const t of targets) await timedCall(t.client, t.tool);
    });
    await timedStep('mcp-federation: measuring', setup, async () => {
      for (let round = 0; round < ROUNDS; round++)
        for (let i = 0; i < CALLS; i++) {
          // Which goes first alternates, so neither always follows the other.
          const order = i % 2 === 0 ? targets : [...targets].reverse();
          for (const t of order) t.ms.push(await timedCall(t.client, t.tool));
        }
    });
    const [d, f] = targets.map((t) => ({ p50: percentile(t.ms, 0.5), p99: percentile(t.ms, 0.99) }));
    const table = {
      title: 'tools/call, one at a time',
      header: ['path', 'calls', 'p50', 'p99'],
      rows: targets.map((t, i) => [t.name, String(t.ms.length), fmtMs([d, f][i].p50), fmtMs([d, f][i].p99)]),
    };
    result.tables.push(table);
    say();
    for (const line of tableLines(table, '## ')) say(line);
    const added = f.p50 - d.p50;
    result.checks.push({
      figure: 'federated tools/call: added p50',
      measured: `${added >= 0 ? '+' : ''}${fmtMs(added)}`,
      baseline: `direct ${fmtMs(d.p50)}`,
      ratio: `${(f.p50 / d.p50).toFixed(2)}×`,
      target: `≤ +${TARGET_ADDED_MS} ms`,
      pass: added <= TARGET_ADDED_MS,
    });
    // Where the CPU goes, per call of each kind (a block of each in a row: /proc counts per process).
    database = await databaseBackends(infra.databaseUrl);
    const groups: CpuGroups = {
      'gateway API': () => [gateway.pid!],
      'member (MCP upstream)': () => [upstream.pid!],
      'PostgreSQL (bench database backends)': database.pids,
      'MCP SDK clients (this process)': () => [process.pid],
    };
    const CPU_CALLS = CALLS * 2;
    const perCall: Array<Map<string, number | null>> = [];
    for (const t of targets)
      perCall.push(
        await timedStep(`mcp-federation: CPU of ${t.name}`, `${CPU_CALLS} calls in a row`, () =>
          cpuPerUnit(groups, CPU_CALLS, async () => {
            for (let i = 0; i < CPU_CALLS; i++) await timedCall(t.client, t.tool);
          }),
        ),
      );
    const cpuTable = {
      title: `CPU ms per call, by process (${CPU_CALLS} calls of each in a row)`,
      header: ['process', 'direct', 'federated', 'added'],
      rows: Object.keys(groups).map((name) => {
        const [direct, federated] = perCall.map((m) => m.get(name));
        const added = direct == null || federated == null ? null : federated - direct;
        return [name, cpuCell(direct, 3), cpuCell(federated, 3), cpuCell(added, 3)];
      }),
    };
    result.tables.push(cpuTable);
    say();
    for (const line of tableLines(cpuTable, '## ')) say(line);
    say();
    say(
      `- federation adds ${fmtMs(added)} at p50 (${(f.p50 / d.p50).toFixed(2)}×), target ≤ ${TARGET_ADDED_MS} ms → ${added <= TARGET_ADDED_MS ? 'met' : 'MISSED'}`,
    );
  } finally {
    await Promise.all(clients.map((c) => c.close()));
    await database?.end();
    await stopChildren(children);
    await removeBenchInfra(infra, dataDir);
  }
  return finishResult(result, startedMs);
}

if (import.meta.main) await runAsMain(runMcpFederationBench);
