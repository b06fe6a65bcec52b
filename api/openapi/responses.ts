// The shape of one operation of the document and the answers many operations share. Bodies
// and parameters are the zod schemas the routes parse with; the document is generated from
// them (api/openapi/document.ts).
import type { z } from 'zod';
import { BudgetExceededBody, ErrorBody } from './schemas.ts';

export type ResponseSpec = {
  description: string;
  /** A registered (`.meta({ id })`) zod schema, or a raw media type with any content. */
  body?: z.ZodType | { mediaType: string };
  /** Alternative bodies (e.g. a 402 challenge or an error). */
  oneOf?: z.ZodType[];
  headers?: Record<string, string>;
};

export type Operation = {
  method: 'get' | 'post' | 'put' | 'patch' | 'delete';
  path: string;
  operationId: string;
  tag: string;
  summary: string;
  description?: string;
  /** Bearer token required (every /v1 resource); false for probes and this description. */
  auth: boolean;
  /** The object schemas the route reads its path, query and headers with. */
  params?: { path?: z.ZodObject; query?: z.ZodObject; header?: z.ZodObject };
  /** A JSON body (its component id from the schema's meta, or `id` for a schema built per process) or a raw one. */
  body?: { schema: z.ZodType; id?: string; required: boolean } | { mediaType: string; required: boolean };
  responses: Record<string, ResponseSpec>;
};

export const err = (description: string): ResponseSpec => ({ description, body: ErrorBody });
const unauthorized: ResponseSpec = {
  description: 'Missing or invalid bearer token, or absent tenant/user claims. No body.',
};
export const serverError: ResponseSpec = { description: 'Unexpected server error. No body.' };
export const notFound = (what: string) => err(`No ${what} with that id in the caller's tenant.`);
/** Every management operation with a JSON body: the body parser's cap (docs/PROXY.md "Pathological JSON"). */
const bodyTooLarge = err('JSON body over 1 MiB.');

/**
 * An operation's answers with those its kind shares (its own win): every /v1 resource's 401
 * and 500 (a bearer token, no body on either), and the body parser's 413 for a JSON body.
 */
export function responsesOf(op: Operation): Record<string, ResponseSpec> {
  return {
    ...(op.auth ? { 401: unauthorized, 500: serverError } : {}),
    ...(op.body && 'schema' in op.body ? { 413: bodyTooLarge } : {}),
    ...op.responses,
  };
}
export const rateLimited = (what: string): ResponseSpec => ({
  description: what,
  body: ErrorBody,
  headers: { 'Retry-After': 'Seconds, at most 60.' },
});

/** A proxied call's 429: a rate limit (`{error}`), or a hard budget the call would take past its limit. */
export const callLimited = (what: string): ResponseSpec => ({
  description: `${what} Or \`budget exceeded\` naming the budget (\`budget_id\`): Retry-After is then the seconds until its window resets (absent for a \`total\` budget).`,
  oneOf: [ErrorBody, BudgetExceededBody],
  headers: { 'Retry-After': 'Seconds.' },
});
