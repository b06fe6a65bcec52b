// The catalog: every agent of the tenant with its status, protocol, price and whether it is public.
import { useContext } from 'preact/hooks';
import { AgentsContext, Empty, Panel } from '../components.tsx';
import { usdc, when } from '../format.ts';
import type { Polled } from '../poll.ts';
import { href } from '../route.ts';
import type { Agent } from '../types.ts';

export function Agents({ catalog }: { catalog: Polled<unknown> }) {
  const agents = [...useContext(AgentsContext).values()];
  return (
    <>
      <div class="page-head">
        <h1>Agents</h1>
      </div>
      <Panel title="Catalog" polled={catalog}>
        {agents.length === 0 ? (
          <Empty>No agents yet: create one with POST /v1/agents (docs/API.md).</Empty>
        ) : (
          <div class="table-wrap">
            <table class="agents">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Status</th>
                  <th scope="col">Protocol</th>
                  <th scope="col">Price</th>
                  <th scope="col">Scheme</th>
                  <th scope="col">Public</th>
                  <th scope="col">Created</th>
                </tr>
              </thead>
              <tbody>
                {agents.map((a) => (
                  <AgentRow agent={a} />
                ))}
              </tbody>
            </table>
          </div>
        )}
      </Panel>
    </>
  );
}

function AgentRow({ agent }: { agent: Agent }) {
  return (
    <tr data-agent={agent.id}>
      <td>
        <a href={href(`agents/${encodeURIComponent(agent.id)}`)}>{agent.name}</a>
      </td>
      <td>
        <span class={`badge ${agent.status}`}>{agent.status}</span>
      </td>
      <td>{agent.protocol}</td>
      <td>{agent.pricing ? usdc(agent.pricing.amount) : 'free'}</td>
      <td>{agent.pricing ? (agent.pricing.scheme ?? 'exact') : '—'}</td>
      <td>{agent.public ? 'yes' : 'no'}</td>
      <td>{when(agent.created_at)}</td>
    </tr>
  );
}
