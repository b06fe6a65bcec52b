// "Sign in with" the OpenID provider that issues the tenants' tokens (AUTH_ISSUER): the
// authorization code flow with PKCE (RFC 7636, S256) for a public client, all in the browser.
// The verifier and state wait in sessionStorage across the provider's redirect; the code comes
// back to this page and is exchanged at the provider's token endpoint for the access token,
// which is then used, and kept, as a pasted token is.
import { config } from './config.ts';

const PENDING_KEY = 'gateway-console-oidc';

type Discovery = { authorization_endpoint: string; token_endpoint: string };
/** What waits across the redirect; `view` is the hash route to return to (the redirect URI has none). */
type Pending = { state: string; verifier: string; tokenEndpoint: string; redirectUri: string; view: string };

const base64url = (bytes: Uint8Array) =>
  btoa(String.fromCharCode(...bytes))
    .replace(/\+/g, '-')
    .replace(/\//g, '_')
    .replace(/=+$/, '');

const random = (n: number) => base64url(crypto.getRandomValues(new Uint8Array(n)));

async function discover(issuer: string): Promise<Discovery> {
  const res = await fetch(`${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`, { credentials: 'omit' });
  if (!res.ok) throw new Error(`the provider's discovery document answered ${res.status}`);
  return (await res.json()) as Discovery;
}

/** This page without its query or hash: where the provider sends the code back. */
const redirectUri = () => `${location.origin}${location.pathname}`;

/** Off to the provider's sign-in page. */
export async function startSignIn(): Promise<void> {
  const oidc = config.oidc!;
  const found = await discover(oidc.issuer);
  const verifier = random(32);
  const challenge = base64url(
    new Uint8Array(await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier))),
  );
  const pending: Pending = {
    state: random(16),
    verifier,
    tokenEndpoint: found.token_endpoint,
    redirectUri: redirectUri(),
    view: location.hash,
  };
  sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
  const url = new URL(found.authorization_endpoint);
  for (const [key, value] of Object.entries({
    response_type: 'code',
    client_id: oidc.clientId,
    redirect_uri: pending.redirectUri,
    scope: oidc.scope,
    state: pending.state,
    code_challenge: challenge,
    code_challenge_method: 'S256',
  }))
    url.searchParams.set(key, value);
  location.assign(url.toString());
}

/**
 * Back from the provider: the code exchanged for a token (null when this page load is no such
 * return). The code and state leave the address bar either way.
 */
export async function finishSignIn(): Promise<string | null> {
  const params = new URLSearchParams(location.search);
  const code = params.get('code');
  const error = params.get('error');
  if (!code && !error) return null;
  const pending = JSON.parse(sessionStorage.getItem(PENDING_KEY) ?? 'null') as Pending | null;
  sessionStorage.removeItem(PENDING_KEY);
  history.replaceState(null, '', `${location.pathname}${pending?.view ?? location.hash}`);
  window.dispatchEvent(new HashChangeEvent('hashchange'));
  if (error) throw new Error(`the provider refused: ${params.get('error_description') ?? error}`);
  if (!pending || params.get('state') !== pending.state)
    throw new Error('this sign-in was not started here (state mismatch)');
  const res = await fetch(pending.tokenEndpoint, {
    method: 'POST',
    credentials: 'omit',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({
      grant_type: 'authorization_code',
      code: code!,
      redirect_uri: pending.redirectUri,
      client_id: config.oidc!.clientId,
      code_verifier: pending.verifier,
    }),
  });
  const body = (await res.json().catch(() => ({}))) as { access_token?: string; error?: string };
  if (!res.ok || !body.access_token)
    throw new Error(`the provider's token endpoint answered ${res.status}${body.error ? ` (${body.error})` : ''}`);
  return body.access_token;
}
