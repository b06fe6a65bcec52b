// One window of analytics as the overview and an agent's page show it: the range, the totals
// as tiles and the calls, latency and revenue charts, from one polled GET /v1/analytics.
import { useMemo } from 'preact/hooks';
import { seriesOf, totalsOf } from './analytics.ts';
import { Chart } from './chart.tsx';
import { Panel } from './components.tsx';
import { count, ms, percent, usdc } from './format.ts';
import type { Polled } from './poll.ts';
import type { AnalyticsResult } from './types.ts';

export function AnalyticsPanel({
  title,
  polled,
  agentId,
}: {
  title: string;
  polled: Polled<AnalyticsResult>;
  /** Only this agent's groups; every group when absent. */
  agentId?: string;
}) {
  const data = polled.data;
  const series = useMemo(
    () =>
      data &&
      seriesOf(
        agentId === undefined ? data.groups : data.groups.filter((g) => g.agent_id === agentId),
        data.range,
        data.bucket,
      ),
    [data, agentId],
  );
  const totals = series && totalsOf(series);
  return (
    <Panel title={title} polled={polled}>
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
      {data && series && (
        <div class="charts">
          <Chart
            title="Calls and errors"
            bucket={data.bucket}
            x={series.x}
            lines={[
              { label: 'Calls', values: series.calls, color: '#3b82f6', bars: true },
              { label: 'Errors', values: series.errors, color: '#ef4444', bars: true },
            ]}
            format={(v) => count(v)}
          />
          <Chart
            title="Latency"
            bucket={data.bucket}
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
              bucket={data.bucket}
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
  );
}
