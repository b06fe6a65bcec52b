// Part 2 of the proxy bench: the 202 of POST /v1/proxy/{id} (body, row and intent to start
// committed; the workflow started after the answer) against a bare `client.workflow.start` of
// the same workflow on the same Temporal server, sequential and interleaved.
import { randomUUID } from 'node:crypto';
import { Pool } from 'undici';
import { connectClient } from '../temporal/client.ts';
import { AgentId, InvocationStatus, TenantId } from '../temporal/search-attributes.ts';
import { startStep } from '../scripts/lib/progress.ts';
import { fmtMs as fmt, say } from './print.ts';
import { BODY } from './proxy-load.ts';
import { percentile, type BenchResult } from './result.ts';

function summarize(values: number[]) {
  const sorted = [...values].sort((a, b) => a - b);
  return {
    p50: percentile(sorted, 0.5),
    p99: percentile(sorted, 0.99),
    mean: values.reduce((a, b) => a + b, 0) / values.length,
  };
}

export type StartTimes = ReturnType<typeof summarize>;

/** Measures both paths `starts` times each; returns the gateway's (`tx`) and the bare (`bs`) summaries. */
export async function runTransactional(
  options: {
    temporalAddress: string;
    apiUrl: string;
    auth: Record<string, string>;
    tenant: string;
    agentId: string;
    starts: number;
  },
  result: BenchResult,
): Promise<{ tx: StartTimes; bs: StartTimes }> {
  const { apiUrl, auth, tenant, agentId, starts: STARTS } = options;
  const temporal = await connectClient(options.temporalAddress, 'default');
  const gatewayStarts: number[] = [];
  const bareStarts: number[] = [];
  const txPool = new Pool(apiUrl, { connections: 1 });
  const startOnce = async () => {
    const t0 = performance.now();
    // The same start the gateway makes: same workflow, search attributes and summary.
    await temporal.workflow.start('InvocationWorkflow', {
      taskQueue: 'bench-bare-start',
      workflowId: `bench-${randomUUID()}`,
      args: [{ invocationId: 'bench', tenantId: tenant, agentId: agentId }],
      typedSearchAttributes: [
        { key: TenantId, value: tenant },
        { key: AgentId, value: agentId },
        { key: InvocationStatus, value: 'pending' },
      ],
      staticSummary: `bench (${agentId})`,
    });
    return performance.now() - t0;
  };
  const acceptOnce = async () => {
    const t0 = performance.now();
    const res = await txPool.request({
      path: `/v1/proxy/${agentId}`,
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/octet-stream' },
      body: BODY,
    });
    await res.body.dump();
    if (res.statusCode !== 202) throw new Error(`transactional answered ${res.statusCode}`);
    return performance.now() - t0;
  };
  const startsStep = startStep('proxy: transactional starts', `20 warm-ups, then ${STARTS} of each, interleaved`);
  for (let i = 0; i < 20; i++) {
    await startOnce();
    await acceptOnce();
  }
  for (let i = 0; i < STARTS; i++) {
    bareStarts.push(await startOnce());
    gatewayStarts.push(await acceptOnce());
    startsStep.progress(i + 1, STARTS, 'starts');
  }
  startsStep.end();
  await txPool.close();
  await temporal.connection.close();
  const tx = summarize(gatewayStarts);
  const bs = summarize(bareStarts);
  say();
  say(`## transactional 202 vs bare workflow.start (sequential, ${STARTS} each, interleaved)`);
  say(`| path | p50 | p99 | mean |`);
  say(`|---|---|---|---|`);
  say(`| bare client.workflow.start | ${fmt(bs.p50)} | ${fmt(bs.p99)} | ${fmt(bs.mean)} |`);
  say(`| POST /v1/proxy/{id} → 202 | ${fmt(tx.p50)} | ${fmt(tx.p99)} | ${fmt(tx.mean)} |`);
  say(`ratio p50 ${(tx.p50 / bs.p50).toFixed(2)}×, p99 ${(tx.p99 / bs.p99).toFixed(2)}×`);
  result.tables.push({
    title: `transactional 202 vs bare workflow.start (sequential, ${STARTS} each, interleaved)`,
    header: ['path', 'p50', 'p99', 'mean'],
    rows: [
      [
        'bare client.workflow.start (same workflow, search attributes, summary)',
        fmt(bs.p50),
        fmt(bs.p99),
        fmt(bs.mean),
      ],
      ['POST /v1/proxy/{id} → 202', fmt(tx.p50), fmt(tx.p99), fmt(tx.mean)],
    ],
  });
  result.checks.push(
    {
      figure: 'transactional 202 p50',
      measured: fmt(tx.p50),
      baseline: `bare start ${fmt(bs.p50)}`,
      ratio: `${(tx.p50 / bs.p50).toFixed(2)}×`,
      target: '≤ 0.8× the bare start',
      pass: tx.p50 <= 0.8 * bs.p50,
    },
    {
      figure: 'transactional 202 p99',
      measured: fmt(tx.p99),
      baseline: `bare start ${fmt(bs.p99)}`,
      ratio: `${(tx.p99 / bs.p99).toFixed(2)}×`,
      target: '≤ 1.0× the bare start',
      pass: tx.p99 <= 1.0 * bs.p99,
    },
  );
  return { tx, bs };
}
