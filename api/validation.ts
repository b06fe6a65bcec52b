// Parses a request body, query or path against a zod schema; the first problem becomes a 400
// whose message names the field (a schema's own message where it has one), never the input's
// value. The same schemas generate the OpenAPI document (api/openapi/document.ts), so what
// the document allows is what these accept.
import { z } from 'zod';
import { badRequest } from './errors.ts';
import type { IdPrefix } from '../lib/ids.ts';
import { anyString, holdsUnstorableText } from '../lib/storable-text.ts';

function fallbackMessage(issue: { path?: PropertyKey[]; code?: string }): string {
  const field = (issue.path ?? []).map(String).join('.');
  return field ? `invalid ${field}` : 'invalid body';
}

/**
 * PostgreSQL text and jsonb cannot hold U+0000, nor jsonb a lone surrogate: such input is a 400
 * here, not a 500 at the database. The document says it of every request string
 * (api/openapi/document.ts).
 */
export function rejectNul(input: unknown): void {
  if (anyString(input, (text) => text.includes('\u0000'))) throw badRequest('text must not contain NUL characters');
  if (holdsUnstorableText(input)) throw badRequest('text must not contain lone surrogates (invalid UTF-16)');
}

/** A JSON body: text PostgreSQL cannot store is refused before the schema reads it. */
export function parseOr400<S extends z.ZodType>(schema: S, input: unknown): z.infer<S> {
  rejectNul(input);
  return parseWith(schema, input);
}

function parseWith<S extends z.ZodType>(schema: S, input: unknown): z.infer<S> {
  const parsed = schema.safeParse(input ?? {}, { error: fallbackMessage });
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  if (issue.code === 'unrecognized_keys') {
    const prefix = issue.path.length ? `${issue.path.join('.')}.` : '';
    throw badRequest(`unknown field: ${issue.keys.map((k) => prefix + k).join(', ')}`);
  }
  throw badRequest(issue.message);
}

/** The schema inside optional/default/nullable wrappers and a transform's input side. */
function inner(schema: z.ZodType): z.ZodType {
  const def = (schema as { _zod: { def: { type: string; innerType?: z.ZodType; in?: z.ZodType } } })._zod.def;
  if (def.innerType) return inner(def.innerType);
  if (def.type === 'pipe' && def.in) return inner(def.in);
  return schema;
}

/**
 * A query string read against an object schema of its parameters: a parameter given twice is a
 * 400 (unless its schema takes an array), and an integer parameter is read from its decimal
 * digits only (OpenAPI's form style), so `1e2`, ` 7` or an empty value is not an integer. A
 * value that reaches the database is the schema's to keep free of U+0000 (the agents' `tag`).
 */
export function parseQuery<S extends z.ZodObject>(
  schema: S,
  query: Record<string, string | string[] | undefined>,
): z.infer<S> {
  const shape = schema.shape as Record<string, z.ZodType>;
  const values: Record<string, unknown> = {};
  for (const [name, raw] of Object.entries(query)) {
    // Parameters the endpoint does not define are ignored (`__proto__` and the like included).
    if (!Object.hasOwn(shape, name)) continue;
    const field = shape[name];
    const type = inner(field)._zod.def.type;
    if (Array.isArray(raw) && type !== 'array' && type !== 'union') throw badRequest(`${name} may be given once`);
    values[name] = type === 'number' && typeof raw === 'string' && /^-?[0-9]{1,16}$/.test(raw) ? Number(raw) : raw;
  }
  return parseWith(schema, values);
}

const UUID_V7 = '[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}';

/** A resource id as it appears in a path (`agt_<uuidv7>`); any other value is answered 404. */
export function idParam(prefix: IdPrefix, what: string) {
  return idField(prefix).meta({ description: `${what} id (\`${prefix}_<uuidv7>\`). Any other value is answered 404.` });
}

/** The whole of a well-formed id of `prefix` (lib/ids.ts mints them). */
export function idPattern(prefix: IdPrefix): RegExp {
  return new RegExp(`^${prefix}_${UUID_V7}$`);
}

/** A resource id in a query or body: anything else is a 400 with `message`. */
export function idField(prefix: IdPrefix, message?: string) {
  return z.string({ error: message }).regex(idPattern(prefix), message);
}

/**
 * A date-time query parameter (`since`, `until`): its value is read by api/query-time.ts (RFC
 * 3339, an unencoded `+hh:mm` offset read as the `+` it was); empty is not a date-time.
 */
export function instantParam(name: string, description: string) {
  const message = `${name} must be an RFC 3339 date-time`;
  return z
    .string({ error: (i) => (i.input === undefined ? `${name} is required` : `${name} may be given once`) })
    .min(1, message)
    .meta({ format: 'date-time', description: `${description} Its instant must fall in years 0001 to 9999 in UTC.` });
}

/** No U+0000 (PostgreSQL text cannot hold it): said in the schema where a pattern is already given. */
// eslint-disable-next-line no-control-regex -- U+0000 is the one character this pattern is about
export const NO_NUL = /^[^\u0000]*$/;
/** What String.prototype.trim removes (ECMAScript WhiteSpace and LineTerminator). */
const NOT_TRIMMED = /[^\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]/;

/**
 * A resource name: at most 200 characters as sent, not only whitespace, stored trimmed. The
 * length is checked before trimming so that the document's maxLength is the rule.
 */
export function nameField(emptyMessage: string) {
  return maxChars(
    z.string({ error: (i) => (i.input === undefined ? 'name is required' : 'name must be a string') }),
    200,
    'name is too long',
  )
    .regex(NO_NUL, 'name must not contain NUL characters')
    .regex(NOT_TRIMMED, emptyMessage)
    .trim();
}

/**
 * At most `max` characters as JSON Schema's maxLength counts them (code points): zod's .max
 * counts UTF-16 units, so an emoji would count twice and the document's limit would not be
 * the server's.
 */
export function maxChars(schema: z.ZodString, max: number, message: string): z.ZodString {
  return schema
    .refine((value) => {
      let count = 0;
      for (const _ of value) if (++count > max) return false;
      return true;
    }, message)
    .meta({ maxLength: max });
}
