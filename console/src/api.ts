// The console reads the gateway only through /v1 with the tenant's bearer token, kept in
// sessionStorage: gone when the browser session ends, never in a cookie the API would read.
import { config } from './config.ts';

const TOKEN_KEY = 'gateway-console-token';

export const savedToken = (): string | null => sessionStorage.getItem(TOKEN_KEY);
export const saveToken = (token: string): void => sessionStorage.setItem(TOKEN_KEY, token);
export const forgetToken = (): void => sessionStorage.removeItem(TOKEN_KEY);

/** An answer other than 2xx: its status, its `{error}` and, for a 429, when to ask again. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

/** Fired when the API refuses the saved token (401): the app goes back to sign-in. */
export const SIGNED_OUT = 'console-signed-out';

type Params = Record<string, string | number | undefined | null>;

function apiUrl(path: string, params: Params = {}): string {
  const url = new URL(path.replace(/^\//, ''), new URL(config.apiBase, location.href));
  for (const [key, value] of Object.entries(params))
    if (value !== undefined && value !== null && value !== '') url.searchParams.set(key, String(value));
  return url.toString();
}

/** GET a /v1 path as JSON with `token` (default: the saved one). */
export async function getJson<T>(
  path: string,
  params: Params = {},
  token = savedToken(),
  signal?: AbortSignal,
): Promise<T> {
  const res = await fetch(apiUrl(path, params), {
    headers: { accept: 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    cache: 'no-store',
    credentials: 'omit',
    signal,
  });
  if (res.ok) return (await res.json()) as T;
  let message = `${res.status} ${res.statusText}`;
  try {
    const body = (await res.json()) as { error?: unknown };
    if (typeof body.error === 'string') message = body.error;
  } catch {
    // not JSON: the status line says it
  }
  if (res.status === 401 && token === savedToken()) {
    forgetToken();
    window.dispatchEvent(new CustomEvent(SIGNED_OUT, { detail: message }));
  }
  const retry = Number(res.headers.get('retry-after'));
  throw new HttpError(res.status, message, Number.isFinite(retry) && retry > 0 ? retry : undefined);
}

export type Page<T> = { data: T[]; next_cursor: string | null };

/** Pages of a list, newest first, until `max` rows or the last page. */
export async function getPages<T>(
  path: string,
  params: Params,
  max: number,
  signal?: AbortSignal,
): Promise<{ rows: T[]; truncated: boolean }> {
  const rows: T[] = [];
  let cursor: string | null = null;
  do {
    const page: Page<T> = await getJson<Page<T>>(path, { ...params, limit: 100, cursor }, savedToken(), signal);
    rows.push(...page.data);
    cursor = page.next_cursor;
  } while (cursor && rows.length < max);
  return { rows: rows.slice(0, max), truncated: cursor !== null || rows.length > max };
}
