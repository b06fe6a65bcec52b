// One agent: its facts, its charts over the chosen window, its latest calls and the policy
// decisions made about it.
import { useContext } from 'preact/hooks';
import { getJson } from '../api.ts';
import { windowName, windowRange, WINDOWS, type WindowName } from '../analytics.ts';
import { AnalyticsPanel } from '../analytics-panel.tsx';
import { AgentsContext, Empty, Panel, WindowTabs } from '../components.tsx';
import { usdc, when } from '../format.ts';
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
      <AnalyticsPanel title={`${WINDOWS[span].label}: calls, latency and revenue`} polled={analytics} agentId={id} />
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
