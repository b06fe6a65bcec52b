// Sign in: a bearer token pasted here is tried on GET /v1/agents; kept (for this browser session
// only) when the API takes it, refused with the API's own reason when it does not.
import { useState } from 'preact/hooks';
import { getJson, HttpError, saveToken } from '../api.ts';

export function SignIn({ onSignedIn, notice }: { onSignedIn(): void; notice?: string }) {
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function submit(event: Event) {
    event.preventDefault();
    const token = String(new FormData(event.currentTarget as HTMLFormElement).get('token') ?? '')
      .trim()
      .replace(/^Bearer\s+/i, '');
    if (!token) return setError('Paste a bearer token first.');
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
