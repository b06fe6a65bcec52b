// The console's frame: sign-in until a token is kept, then the navigation and the view the hash names.
import { useEffect, useMemo, useState } from 'preact/hooks';
import { forgetToken, getPages, savedToken, SIGNED_OUT } from './api.ts';
import { AgentsContext } from './components.tsx';
import { usePoll } from './poll.ts';
import { href, useRoute } from './route.ts';
import type { Agent } from './types.ts';
import { AgentView } from './pages/agent.tsx';
import { Agents } from './pages/agents.tsx';
import { Invocations } from './pages/invocations.tsx';
import { Money } from './pages/money.tsx';
import { Overview } from './pages/overview.tsx';
import { SignIn } from './pages/signin.tsx';

const VIEWS = [
  { path: 'overview', label: 'Overview' },
  { path: 'agents', label: 'Agents' },
  { path: 'invocations', label: 'Invocations' },
  { path: 'money', label: 'Money' },
];

export function App() {
  const [signedIn, setSignedIn] = useState(() => savedToken() !== null);
  const [notice, setNotice] = useState<string | undefined>();
  useEffect(() => {
    const onSignedOut = (e: Event) => {
      setNotice(`Signed out: the API refused the token (${(e as CustomEvent<string>).detail}).`);
      setSignedIn(false);
    };
    window.addEventListener(SIGNED_OUT, onSignedOut);
    return () => window.removeEventListener(SIGNED_OUT, onSignedOut);
  }, []);
  if (!signedIn)
    return (
      <SignIn
        notice={notice}
        onSignedIn={() => {
          setNotice(undefined);
          setSignedIn(true);
        }}
      />
    );
  return (
    <Console
      onSignOut={() => {
        forgetToken();
        setNotice('Signed out.');
        setSignedIn(false);
      }}
    />
  );
}

function Console({ onSignOut }: { onSignOut(): void }) {
  const route = useRoute();
  const catalog = usePoll((signal) => getPages<Agent>('v1/agents', {}, 1000, signal), [], 30_000);
  const agents = useMemo(() => new Map((catalog.data?.rows ?? []).map((a) => [a.id, a])), [catalog.data]);
  const [view = 'overview', id] = route.path;
  useEffect(() => {
    document.title = `${VIEWS.find((v) => v.path === view)?.label ?? 'Console'} · Agent gateway console`;
  }, [view]);

  let page;
  if (view === 'agents' && id) page = <AgentView id={id} route={route} />;
  else if (view === 'agents') page = <Agents catalog={catalog} />;
  else if (view === 'invocations') page = <Invocations route={route} />;
  else if (view === 'money') page = <Money route={route} />;
  else page = <Overview route={route} />;

  return (
    <AgentsContext.Provider value={agents}>
      <a class="skip" href="#main" onClick={(e) => (e.preventDefault(), document.getElementById('main')?.focus())}>
        Skip to content
      </a>
      <header class="top">
        <span class="brand">Agent gateway</span>
        <nav aria-label="Console">
          {VIEWS.map((v) => (
            <a href={href(v.path)} aria-current={view === v.path ? 'page' : undefined}>
              {v.label}
            </a>
          ))}
        </nav>
        <button type="button" class="secondary" onClick={onSignOut}>
          Sign out
        </button>
      </header>
      <main id="main" tabIndex={-1}>
        {page}
      </main>
    </AgentsContext.Provider>
  );
}
