// Hash routes (#/agents/agt_…?window=day): the API serves one page, /console, whatever the view.
import { useEffect, useState } from 'preact/hooks';

export type Route = { path: string[]; query: URLSearchParams };

function current(): Route {
  const hash = location.hash.replace(/^#\/?/, '');
  const [path = '', query = ''] = hash.split('?', 2);
  return { path: path.split('/').filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(query) };
}

export function useRoute(): Route {
  const [route, setRoute] = useState(current);
  useEffect(() => {
    const onChange = () => setRoute(current());
    window.addEventListener('hashchange', onChange);
    return () => window.removeEventListener('hashchange', onChange);
  }, []);
  return route;
}

/** A link's href for a view and its query (empty values left out). */
export function href(path: string, query: Record<string, string | undefined> = {}): string {
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(query)) if (value) params.set(key, value);
  const q = params.toString();
  return `#/${path}${q ? `?${q}` : ''}`;
}

/** Replaces the query of the current view (filters), keeping its path. */
export function setQuery(query: Record<string, string | undefined>): void {
  const { path } = current();
  location.hash = href(path.map(encodeURIComponent).join('/'), query);
}
