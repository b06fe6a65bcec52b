// Text PostgreSQL cannot store: U+0000 (neither text nor jsonb holds it), and a lone UTF-16
// surrogate, which reaches jsonb as a `\ud800` escape that it refuses. Input holding either is
// refused where it enters (a 400, an upstream's card refused), never left to fail at the
// database as a 500.

/** True when a string anywhere in the value (keys included) passes `test`. */
export function anyString(value: unknown, test: (text: string) => boolean): boolean {
  if (typeof value === 'string') return test(value);
  if (Array.isArray(value)) return value.some((v) => anyString(v, test));
  if (value && typeof value === 'object') return Object.entries(value).some(([k, v]) => test(k) || anyString(v, test));
  return false;
}

/** A string anywhere in the value (keys included) holds U+0000 or a lone surrogate. */
export const holdsUnstorableText = (value: unknown): boolean =>
  anyString(value, (text) => text.includes('\u0000') || !text.isWellFormed());
