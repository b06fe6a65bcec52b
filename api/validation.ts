// Parses a request body or query against a zod schema; the first problem becomes a 400 whose
// message names the field (a schema's own message where it has one), never the input's value.
import type { z } from 'zod';
import { badRequest } from './errors.ts';

function fallbackMessage(issue: { path?: PropertyKey[]; code?: string }): string {
  const field = (issue.path ?? []).map(String).join('.');
  return field ? `invalid ${field}` : 'invalid body';
}

export function parseOr400<S extends z.ZodType>(schema: S, input: unknown): z.infer<S> {
  const parsed = schema.safeParse(input ?? {}, { error: fallbackMessage });
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  if (issue.code === 'unrecognized_keys') {
    const prefix = issue.path.length ? `${issue.path.join('.')}.` : '';
    throw badRequest(`unknown field: ${issue.keys.map((k) => prefix + k).join(', ')}`);
  }
  throw badRequest(issue.message);
}
