// Sign in: a bearer token pasted here, or one from the OpenID provider that issues the tenants'
// tokens ("sign in with", when configured), is tried on GET /v1/agents; kept (for this browser
// session only) when the API takes it, refused with the API's own reason when it does not.
import { useEffect, useState } from 'preact/hooks';
import { getJson, HttpError, saveToken } from '../api.ts';
import { config } from '../config.ts';
import { finishSignIn, startSignIn } from '../oidc.ts';

export function SignIn({ onSignedIn, notice }: { onSignedIn(): void; notice?: string }) {
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function tryToken(token: string): Promise<void> {
    setBusy(true);
    setError(null);
    try {
      await getJson('v1/agents', { limit: 1 }, token);
      saveToken(token);
      onSignedIn();
    } catch (err) {
      setError(
        err instanceof HttpError && err.status === 401
          ? `The API refused this token: ${err.message}.`
          : `Could not check the token: ${(err as Error).message}`,
      );
    } finally {
      setBusy(false);
    }
  }

  // Back from the provider with a code: its token is tried like a pasted one.
  useEffect(() => {
    if (!config.oidc) return;
    setBusy(true);
    finishSignIn()
      .then((token) => (token ? tryToken(token) : setBusy(false)))
      .catch((err: Error) => {
        setBusy(false);
        setError(`Sign-in with the provider failed: ${err.message}.`);
      });
  }, []);

  async function submit(event: Event) {
    event.preventDefault();
    const token = String(new FormData(event.currentTarget as HTMLFormElement).get('token') ?? '')
      .trim()
      .replace(/^Bearer\s+/i, '');
    if (!token) return setError('Paste a bearer token first.');
    await tryToken(token);
  }

  async function withProvider() {
    setBusy(true);
    setError(null);
    try {
      await startSignIn();
    } catch (err) {
      setBusy(false);
      setError(`Sign-in with the provider failed: ${(err as Error).message}.`);
    }
  }

  return (
    <main class="signin" id="main">
      <h1>Agent gateway console</h1>
      <p>
        Sign in with a tenant's bearer token (npm start prints one; npm run token mints more). It is kept in this
        browser tab's session only.
      </p>
      {notice && (
        <p class="notice" role="status">
          {notice}
        </p>
      )}
      {config.oidc && (
        <p>
          <button type="button" onClick={withProvider} disabled={busy}>
            Sign in with {new URL(config.oidc.issuer).host}
          </button>
        </p>
      )}
      <form onSubmit={submit}>
        <label for="token">Bearer token</label>
        <textarea
          id="token"
          name="token"
          rows={4}
          autocomplete="off"
          spellcheck={false}
          required
          aria-describedby={error ? 'signin-error' : undefined}
        />
        <button type="submit" disabled={busy}>
          {busy ? 'Checking…' : 'Sign in'}
        </button>
      </form>
      {error && (
        <p id="signin-error" class="error" role="alert">
          {error}
        </p>
      )}
    </main>
  );
}
