// Every invocation of the tenant, newest first, filtered by agent, status, time and caller: the
// API's filters (GET /v1/invocations), so pages hold only matching rows. A caller is a token's
// user, or a payer's address (x402:<address>, any letter case; a bare 0x address is a payer).
import { useContext, useState } from 'preact/hooks';
import { getPages } from '../api.ts';
import { AgentsContext, Empty, Panel } from '../components.tsx';
import { InvocationTable } from '../invocation-table.tsx';
import { usePoll } from '../poll.ts';
import { setQuery, type Route } from '../route.ts';
import type { Agent, Invocation } from '../types.ts';
import { TABLE_EVERY_MS } from './agent.tsx';

const PAGE_ROWS = 100;
const STATUSES = ['pending', 'running', 'succeeded', 'failed'];

/** datetime-local's value (the browser's zone) to RFC 3339, and back. */
const toInstant = (local: string) => (local ? new Date(local).toISOString() : undefined);
function toLocal(iso: string | null): string {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** What the API takes as `caller`: a bare address is a payer's. */
const callerParam = (typed: string) => (/^0x[0-9a-fA-F]{40}$/.test(typed) ? `x402:${typed}` : typed);

export function Invocations({ route }: { route: Route }) {
  const agents = [...useContext(AgentsContext).values()];
  const q = route.query;
  const filters = {
    agent_id: q.get('agent_id') ?? '',
    status: q.get('status') ?? '',
    since: q.get('since') ?? '',
    until: q.get('until') ?? '',
    caller: q.get('caller') ?? '',
  };
  const [shown, setShown] = useState(PAGE_ROWS);
  const list = usePoll(
    (signal) =>
      getPages<Invocation>(
        'v1/invocations',
        {
          agent_id: filters.agent_id,
          status: filters.status,
          since: filters.since,
          until: filters.until,
          caller: callerParam(filters.caller),
        },
        shown,
        signal,
      ),
    [filters.agent_id, filters.status, filters.since, filters.until, filters.caller, shown],
    TABLE_EVERY_MS,
  );
  const rows = list.data?.rows ?? [];

  return (
    <>
      <div class="page-head">
        <h1>Invocations</h1>
      </div>
      <FilterForm key={q.toString()} filters={filters} agents={agents} onApply={() => setShown(PAGE_ROWS)} />
      <Panel title="Invocations" polled={list}>
        {list.data && rows.length === 0 ? <Empty>No invocation matches.</Empty> : <InvocationTable rows={rows} />}
        {list.data?.truncated && (
          <button type="button" class="secondary more" onClick={() => setShown(shown + PAGE_ROWS)}>
            Load {PAGE_ROWS} more
          </button>
        )}
      </Panel>
    </>
  );
}

type Filters = { agent_id: string; status: string; since: string; until: string; caller: string };

/** The filters as typed, applied on submit (Enter or Apply): the query of the view holds what is applied. */
function FilterForm({ filters, agents, onApply }: { filters: Filters; agents: Agent[]; onApply(): void }) {
  const [draft, setDraft] = useState({ ...filters, since: toLocal(filters.since), until: toLocal(filters.until) });
  const bind = (name: keyof Filters) => ({
    name,
    value: draft[name],
    onInput: (e: Event) => setDraft({ ...draft, [name]: (e.currentTarget as HTMLInputElement).value }),
  });
  function apply(event: Event) {
    event.preventDefault();
    onApply();
    setQuery({
      agent_id: draft.agent_id,
      status: draft.status,
      since: toInstant(draft.since),
      until: toInstant(draft.until),
      caller: draft.caller.trim(),
    });
  }
  return (
    <form class="filters" onSubmit={apply} aria-label="Filter invocations">
      <label>
        Agent
        <select {...bind('agent_id')}>
          <option value="">any</option>
          {agents.map((a) => (
            <option value={a.id}>{a.name}</option>
          ))}
        </select>
      </label>
      <label>
        Status
        <select {...bind('status')}>
          <option value="">any</option>
          {STATUSES.map((s) => (
            <option value={s}>{s}</option>
          ))}
        </select>
      </label>
      <label>
        From
        <input type="datetime-local" {...bind('since')} />
      </label>
      <label>
        To
        <input type="datetime-local" {...bind('until')} />
      </label>
      <label>
        Caller
        <input type="search" placeholder="a user, or a payer's 0x address" {...bind('caller')} />
      </label>
      <div class="filter-actions">
        <button type="submit">Apply</button>
        <button type="button" class="secondary" onClick={() => setQuery({})}>
          Clear
        </button>
      </div>
    </form>
  );
}
