// Pieces every view uses: the window picker, a polled panel's state line, agent links.
import type { ComponentChildren } from 'preact';
import { createContext } from 'preact';
import { useContext } from 'preact/hooks';
import { HttpError } from './api.ts';
import { WINDOWS, type WindowName } from './analytics.ts';
import type { Polled } from './poll.ts';
import { href } from './route.ts';
import type { Agent } from './types.ts';
import { short } from './format.ts';

export function WindowTabs({ value, onChange }: { value: WindowName; onChange(w: WindowName): void }) {
  return (
    <div class="tabs" role="group" aria-label="Window">
      {(Object.keys(WINDOWS) as WindowName[]).map((name) => (
        <button type="button" aria-pressed={value === name} onClick={() => onChange(name)}>
          {WINDOWS[name].label}
        </button>
      ))}
    </div>
  );
}

/** Loading, the last refresh, or why the last fetch failed (a 429 says when it retries). */
function PollState({ polled }: { polled: Polled<unknown> }) {
  const { error, at, loading } = polled;
  let text = loading && !at ? 'Loading…' : at ? `Updated ${at.toLocaleTimeString()}` : '';
  if (error) {
    text =
      error instanceof HttpError && error.status === 429
        ? `Rate limited; retrying in ${error.retryAfterSeconds ?? 60} s`
        : `Could not load: ${error.message}`;
  }
  return (
    <p class={`poll-state${error ? ' error' : ''}`} role={error ? 'alert' : 'status'}>
      {text}
    </p>
  );
}

export function Panel({
  title,
  polled,
  children,
  actions,
}: {
  title: string;
  polled?: Polled<unknown>;
  children: ComponentChildren;
  actions?: ComponentChildren;
}) {
  return (
    <section class="panel" aria-label={title}>
      <header>
        <h2>{title}</h2>
        {actions}
        {polled && <PollState polled={polled} />}
      </header>
      {children}
    </section>
  );
}

/** The tenant's agents by id, for names in tables (the app polls the catalog once for every view). */
export const AgentsContext = createContext<Map<string, Agent>>(new Map());

export function AgentLink({ id }: { id: string }) {
  const agents = useContext(AgentsContext);
  const agent = agents.get(id);
  return (
    <a href={href(`agents/${encodeURIComponent(id)}`)} title={id}>
      {agent?.name ?? short(id)}
    </a>
  );
}

export function Empty({ children }: { children: ComponentChildren }) {
  return <p class="empty">{children}</p>;
}
