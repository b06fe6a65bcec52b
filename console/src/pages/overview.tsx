// The tenant's calls, errors, latency and revenue over the chosen window, and who calls most.
import { useMemo } from 'preact/hooks';
import { getJson } from '../api.ts';
import { windowName, windowRange, WINDOWS, type WindowName } from '../analytics.ts';
import { AnalyticsPanel } from '../analytics-panel.tsx';
import { AgentLink, Empty, Panel, WindowTabs } from '../components.tsx';
import { count } from '../format.ts';
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
      <AnalyticsPanel title={WINDOWS[span].label} polled={analytics} />
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
