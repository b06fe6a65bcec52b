// The tenant's calls, errors, latency and revenue over the chosen window, and who calls most.
import { useMemo } from 'preact/hooks';
import { getJson } from '../api.ts';
import { seriesOf, totalsOf, windowName, windowRange, WINDOWS, type WindowName } from '../analytics.ts';
import { Chart } from '../chart.tsx';
import { AgentLink, Empty, Panel, WindowTabs } from '../components.tsx';
import { count, ms, percent, usdc } from '../format.ts';
import { usePoll } from '../poll.ts';
import { href, setQuery, type Route } from '../route.ts';
import type { AnalyticsResult, CallerResult } from '../types.ts';

export const ANALYTICS_EVERY_MS = 60_000;

export function Overview({ route }: { route: Route }) {
  const span = windowName(route.query.get('window'));
  const { bucket } = WINDOWS[span];
  const analytics = usePoll(
    async (signal) => {
      const range = windowRange(span);
      return getJson<AnalyticsResult>('v1/analytics', { ...range, bucket, group_by: 'agent_id' }, undefined, signal);
    },
    [span],
    ANALYTICS_EVERY_MS,
  );
  const callers = usePoll(
    (signal) =>
      getJson<CallerResult>('v1/analytics/callers', { ...windowRange(span), bucket: 'day' }, undefined, signal),
    [span],
    ANALYTICS_EVERY_MS,
  );
  const data = analytics.data;
  const series = useMemo(() => data && seriesOf(data.groups, data.range, data.bucket), [data]);
  const totals = series && totalsOf(series);

  const busiestAgents = useMemo(() => {
    const by = new Map<string, { calls: number; errors: number }>();
    for (const g of data?.groups ?? []) {
      const row = by.get(g.agent_id) ?? { calls: 0, errors: 0 };
      row.calls += g.count;
      row.errors += Math.round(g.count * g.error_rate);
      by.set(g.agent_id, row);
    }
    return [...by.entries()].sort((a, b) => b[1].calls - a[1].calls).slice(0, 10);
  }, [data]);
  const busiestCallers = useMemo(() => {
    const by = new Map<string, { kind: string; calls: number; agents: Set<string> }>();
    for (const g of callers.data?.groups ?? []) {
      const row = by.get(g.user_id) ?? { kind: g.caller_kind, calls: 0, agents: new Set<string>() };
      row.calls += g.count;
      row.agents.add(g.agent_id);
      by.set(g.user_id, row);
    }
    return [...by.entries()].sort((a, b) => b[1].calls - a[1].calls).slice(0, 10);
  }, [callers.data]);

  return (
    <>
      <div class="page-head">
        <h1>Overview</h1>
        <WindowTabs value={span} onChange={(w: WindowName) => setQuery({ window: w })} />
      </div>
      <Panel title={WINDOWS[span].label} polled={analytics}>
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
              <dt>p50 latency (peak)</dt>
              <dd>{ms(totals.p50)}</dd>
            </div>
            <div>
              <dt>p95 latency (peak)</dt>
              <dd>{ms(totals.p95)}</dd>
            </div>
            <div>
              <dt>Revenue</dt>
              <dd data-total="revenue">
                {totals.revenue === null ? (
                  <small>not reported by this API; see Money</small>
                ) : (
                  <>
                    {usdc(totals.revenue)}
                    {!!totals.uncollected && <small> ({usdc(totals.uncollected)} not collected)</small>}
                  </>
                )}
              </dd>
            </div>
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
            {series.hasRevenue && (
              <Chart
                title="Revenue"
                bucket={data!.bucket}
                x={series.x}
                lines={[
                  { label: 'Revenue', values: series.revenue, color: '#8b5cf6', bars: true },
                  { label: 'Not collected', values: series.uncollected, color: '#ef4444', bars: true },
                ]}
                format={(v) => usdc(v)}
              />
            )}
          </div>
        )}
      </Panel>
      <div class="columns">
        <Panel title="Busiest agents">
          {busiestAgents.length === 0 ? (
            <Empty>No completed calls in this window.</Empty>
          ) : (
            <div class="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Agent</th>
                    <th scope="col" class="num">
                      Calls
                    </th>
                    <th scope="col" class="num">
                      Errors
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {busiestAgents.map(([id, row]) => (
                    <tr>
                      <td>
                        <AgentLink id={id} />
                      </td>
                      <td class="num">{count(row.calls)}</td>
                      <td class="num">{count(row.errors)}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
        </Panel>
        <Panel title="Busiest callers" polled={callers}>
          {busiestCallers.length === 0 ? (
            <Empty>No completed calls in this window.</Empty>
          ) : (
            <div class="table-wrap">
              <table>
                <thead>
                  <tr>
                    <th scope="col">Caller</th>
                    <th scope="col">Kind</th>
                    <th scope="col" class="num">
                      Calls
                    </th>
                    <th scope="col" class="num">
                      Agents
                    </th>
                  </tr>
                </thead>
                <tbody>
                  {busiestCallers.map(([user, row]) => (
                    <tr>
                      <td class="mono">
                        <a href={href('invocations', { caller: user })} title="This caller's invocations">
                          {user}
                        </a>
                      </td>
                      <td>{row.kind === 'x402' ? 'payer (x402)' : 'token'}</td>
                      <td class="num">{count(row.calls)}</td>
                      <td class="num">{row.agents.size}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          )}
          {callers.data?.truncated && (
            <p class="note">More callers than the API lists at once: the first 1000 groups.</p>
          )}
        </Panel>
      </div>
    </>
  );
}
