// What the page that serves the console tells it (api/console/routes.ts writes it into a meta
// tag, since the CSP allows no inline script): where the API is relative to the page, and where
// the Temporal Web UI shows a workflow.
export type ConsoleConfig = {
  /** The API's base, relative to the page (the page is served at /console or /console/). */
  apiBase: string;
  /** TEMPORAL_UI_URL: the Temporal Web UI's origin and path, without a trailing slash. */
  temporalUi: string;
  namespace: string;
  /** AUTH_ISSUER's OpenID provider and the console's client there (CONSOLE_OIDC_CLIENT_ID), when configured. */
  oidc?: { issuer: string; clientId: string; scope: string };
};

function read(): ConsoleConfig {
  const content = document.querySelector('meta[name="console-config"]')?.getAttribute('content') ?? '{}';
  const raw = JSON.parse(content) as Partial<ConsoleConfig>;
  return {
    apiBase: raw.apiBase ?? './',
    temporalUi: (raw.temporalUi ?? 'http://localhost:8233').replace(/\/+$/, ''),
    namespace: raw.namespace ?? 'default',
    oidc: raw.oidc,
  };
}

export const config = read();

/** The Temporal Web UI's page of an invocation's workflow (its id is the invocation id). */
export function workflowUrl(invocationId: string): string {
  return `${config.temporalUi}/namespaces/${encodeURIComponent(config.namespace)}/workflows/${encodeURIComponent(invocationId)}`;
}
