// Parses a request body or query against a zod schema; the first problem becomes a 400 whose
// message names the field (a schema's own message where it has one), never the input's value.
import type { z } from 'zod';
import { badRequest } from './errors.ts';

function fallbackMessage(issue: { path?: PropertyKey[]; code?: string }): string {
  const field = (issue.path ?? []).map(String).join('.');
  return field ? `invalid ${field}` : 'invalid body';
}

/** True when a string anywhere in the value (keys included) holds U+0000. */
function containsNul(value: unknown): boolean {
  if (typeof value === 'string') return value.includes('\u0000');
  if (Array.isArray(value)) return value.some(containsNul);
  if (value && typeof value === 'object')
    return Object.entries(value).some(([k, v]) => k.includes('\u0000') || containsNul(v));
  return false;
}

/** PostgreSQL text and jsonb cannot hold U+0000: such input is a 400 here, not a 500 at the database. */
export function rejectNul(input: unknown): void {
  if (containsNul(input)) throw badRequest('text must not contain NUL characters');
}

export function parseOr400<S extends z.ZodType>(schema: S, input: unknown): z.infer<S> {
  rejectNul(input);
  const parsed = schema.safeParse(input ?? {}, { error: fallbackMessage });
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  if (issue.code === 'unrecognized_keys') {
    const prefix = issue.path.length ? `${issue.path.join('.')}.` : '';
    throw badRequest(`unknown field: ${issue.keys.map((k) => prefix + k).join(', ')}`);
  }
  throw badRequest(issue.message);
}
