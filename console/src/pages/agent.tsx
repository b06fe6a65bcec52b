// One agent: its facts, its charts over the chosen window, its latest calls and the policy
// decisions made about it.
import { useContext, useMemo } from 'preact/hooks';
import { getJson } from '../api.ts';
import { seriesOf, totalsOf, windowName, windowRange, WINDOWS, type WindowName } from '../analytics.ts';
import { Chart } from '../chart.tsx';
import { AgentsContext, Empty, Panel, WindowTabs } from '../components.tsx';
import { count, ms, percent, usdc, when } from '../format.ts';
import { InvocationTable } from '../invocation-table.tsx';
import { usePoll } from '../poll.ts';
import { href, setQuery, type Route } from '../route.ts';
import type { Page } from '../api.ts';
import type { AnalyticsResult, Decision, Invocation } from '../types.ts';
import { ANALYTICS_EVERY_MS } from './overview.tsx';

export const TABLE_EVERY_MS = 10_000;

export function AgentView({ id, route }: { id: string; route: Route }) {
  const agent = useContext(AgentsContext).get(id);
  const span = windowName(route.query.get('window'));
  const { bucket } = WINDOWS[span];
  const analytics = usePoll(
    (signal) =>
      getJson<AnalyticsResult>(
        'v1/analytics',
        { ...windowRange(span), bucket, group_by: 'agent_id' },
        undefined,
        signal,
      ),
    [span],
    ANALYTICS_EVERY_MS,
  );
  const invocations = usePoll(
    (signal) => getJson<Page<Invocation>>('v1/invocations', { agent_id: id, limit: 20 }, undefined, signal),
    [id],
    TABLE_EVERY_MS,
  );
  // The decisions endpoint takes no agent: the latest hundred, this agent's among them.
  const decisions = usePoll(
    (signal) => getJson<{ data: Decision[] }>('v1/policy/decisions', { limit: 100 }, undefined, signal),
    [],
    TABLE_EVERY_MS,
  );
  const data = analytics.data;
  const series = useMemo(
    () =>
      data &&
      seriesOf(
        data.groups.filter((g) => g.agent_id === id),
        data.range,
        data.bucket,
      ),
    [data, id],
  );
  const totals = series && totalsOf(series);
  const mine = decisions.data?.data.filter((d) => d.agent_id === id) ?? [];

  return (
    <>
      <div class="page-head">
        <h1>
          <a href={href('agents')}>Agents</a> / {agent?.name ?? id}
        </h1>
        <WindowTabs value={span} onChange={(w: WindowName) => setQuery({ window: w })} />
      </div>
      {agent && (
        <dl class="facts agent-facts">
          <dt>Id</dt>
          <dd class="mono">{agent.id}</dd>
          <dt>Status</dt>
          <dd>
            <span class={`badge ${agent.status}`}>{agent.status}</span>
          </dd>
          <dt>Protocol</dt>
          <dd>{agent.protocol}</dd>
          <dt>Price</dt>
          <dd>
            {agent.pricing
              ? `${usdc(agent.pricing.amount)} (${agent.pricing.scheme ?? 'exact'}, pay to ${agent.pricing.pay_to})`
              : 'free'}
          </dd>
          <dt>Public</dt>
          <dd>{agent.public ? (agent.public_url ?? 'yes') : 'no'}</dd>
        </dl>
      )}
      <Panel title={`${WINDOWS[span].label}: calls and latency`} polled={analytics}>
        {data && (
          <p class="range" data-since={data.range.since} data-until={data.range.until} data-bucket={data.bucket}>
            {new Date(data.range.since).toLocaleString()} – {new Date(data.range.until).toLocaleString()}, per{' '}
            {data.bucket}
          </p>
        )}
        {totals && (
          <dl class="tiles">
            <div>
              <dt>Calls</dt>
              <dd data-total="calls">{count(totals.calls)}</dd>
            </div>
            <div>
              <dt>Errors</dt>
              <dd data-total="errors">
                {count(totals.errors)} {totals.calls > 0 && <small>({percent(totals.errors / totals.calls)})</small>}
              </dd>
            </div>
            <div>
              <dt>p95 latency (peak)</dt>
              <dd>{ms(totals.p95)}</dd>
            </div>
            {totals.revenue !== null && (
              <div>
                <dt>Revenue</dt>
                <dd data-total="revenue">{usdc(totals.revenue)}</dd>
              </div>
            )}
          </dl>
        )}
        {series && (
          <div class="charts">
            <Chart
              title="Calls and errors"
              bucket={data!.bucket}
              x={series.x}
              lines={[
                { label: 'Calls', values: series.calls, color: '#3b82f6', bars: true },
                { label: 'Errors', values: series.errors, color: '#ef4444', bars: true },
              ]}
              format={(v) => count(v)}
            />
            <Chart
              title="Latency"
              bucket={data!.bucket}
              x={series.x}
              lines={[
                { label: 'p50', values: series.p50, color: '#10b981' },
                { label: 'p95', values: series.p95, color: '#f59e0b' },
              ]}
              format={ms}
            />
          </div>
        )}
      </Panel>
      <Panel
        title="Recent invocations"
        polled={invocations}
        actions={
          <a class="more" href={href('invocations', { agent_id: id })}>
            All of this agent's invocations
          </a>
        }
      >
        {invocations.data && invocations.data.data.length === 0 ? (
          <Empty>No calls yet.</Empty>
        ) : (
          invocations.data && <InvocationTable rows={invocations.data.data} showAgent={false} />
        )}
      </Panel>
      <Panel title="Policy decisions" polled={decisions}>
        {mine.length === 0 ? (
          <Empty>No decision about this agent among the tenant's latest hundred.</Empty>
        ) : (
          <div class="table-wrap">
            <table class="decisions">
              <thead>
                <tr>
                  <th scope="col">When</th>
                  <th scope="col">Action</th>
                  <th scope="col">Rule</th>
                  <th scope="col">Reason</th>
                  <th scope="col">Tool</th>
                  <th scope="col">Invocation</th>
                </tr>
              </thead>
              <tbody>
                {mine.map((d) => (
                  <tr data-decision={d.id}>
                    <td>{when(d.created_at)}</td>
                    <td>
                      <span class={`badge ${d.action}`}>{d.action}</span>
                    </td>
                    <td>{d.matched_rule || 'default'}</td>
                    <td>{d.reason}</td>
                    <td>{d.mcp_tool ?? '—'}</td>
                    <td class="mono">{d.invocation_id ?? '—'}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
      </Panel>
    </>
  );
}
