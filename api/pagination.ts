// Cursor pagination for the management lists: `limit` (clamped to 1..100, default 20) and an
// opaque `cursor` that encodes the last id of the previous page (their zod schemas are the
// document's too), parsed here into the domain's Page (gateway/db/pages.ts reads it).
import { z } from 'zod';
import { badRequest } from './errors.ts';
import { isId, type IdPrefix } from '../lib/ids.ts';
import type { Page } from '../gateway/db/pages.ts';

const DEFAULT_LIMIT = 20;
const MAX_LIMIT = 100;

/** `limit` of every list: any integer, clamped (SPEC: out-of-range values are not refused). */
const LimitParam = z
  .int({ error: 'limit must be an integer' })
  .optional()
  .meta({ description: `Page size, default ${DEFAULT_LIMIT}; clamped to [1, ${MAX_LIMIT}].` });

export function clampLimit(limit: number | undefined): number {
  return limit === undefined ? DEFAULT_LIMIT : Math.min(MAX_LIMIT, Math.max(1, limit));
}

/** The query parameters of a paged list (its filters added by the endpoint). */
export const PageQuery = {
  limit: LimitParam,
  cursor: z
    .string({ error: 'cursor may be given once' })
    .min(1, 'invalid cursor')
    .max(512, 'invalid cursor')
    .optional()
    .meta({ description: '`next_cursor` of the previous page (opaque); any other value is a 400.' }),
};

/** The page a parsed `limit` and `cursor` name; a cursor that is not one of ours is a 400. */
export function pageOf(query: { limit?: number; cursor?: string }, prefix: IdPrefix): Page {
  let after: string | undefined;
  if (query.cursor !== undefined) {
    after = Buffer.from(query.cursor, 'base64url').toString('utf8');
    if (!isId(prefix, after)) throw badRequest('invalid cursor');
  }
  return { limit: clampLimit(query.limit), after };
}
