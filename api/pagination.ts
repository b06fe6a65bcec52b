// Cursor pagination for the management lists: `limit` (clamped to 1..100, default 20) and an
// opaque `cursor` that encodes the last id of the previous page (their zod schemas are the
// document's too). Ids are UUIDv7, so id order is creation order and a page boundary never
// shifts when rows are added.
import type { EntityName, MikroORM } from '@mikro-orm/core';
import { z } from 'zod';
import { badRequest, notFound } from './errors.ts';
import { isId, type IdPrefix } from '../lib/ids.ts';

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

export type Page = { limit: number; after: string | undefined };

/** The page a parsed `limit` and `cursor` name; a cursor that is not one of ours is a 400. */
export function pageOf(query: { limit?: number; cursor?: string }, prefix: IdPrefix): Page {
  let after: string | undefined;
  if (query.cursor !== undefined) {
    after = Buffer.from(query.cursor, 'base64url').toString('utf8');
    if (!isId(prefix, after)) throw badRequest('invalid cursor');
  }
  return { limit: clampLimit(query.limit), after };
}

/** Rows were fetched with limit + 1: the extra one only says whether another page exists. */
function pageRows<T extends { id: string }, V>(
  rows: T[],
  limit: number,
  view: (row: T) => V,
): { data: V[]; next_cursor: string | null } {
  const page = rows.slice(0, limit);
  const more = rows.length > limit;
  return {
    data: page.map(view),
    next_cursor: more ? Buffer.from(page[page.length - 1].id, 'utf8').toString('base64url') : null,
  };
}

/** One page of a tenant's rows in id order: `where` (the tenant and any filters) after the page's cursor. */
export async function listPage<T extends { id: string }, V>(
  orm: MikroORM,
  entity: EntityName<T>,
  where: Record<string, unknown>,
  page: Page,
  view: (row: T) => V,
): Promise<{ data: V[]; next_cursor: string | null }> {
  const filter = page.after ? { ...where, id: { $gt: page.after } } : where;
  const rows = (await orm.em
    .fork()
    .find(entity, filter as never, { orderBy: { id: 'asc' } as never, limit: page.limit + 1 })) as T[];
  return pageRows(rows, page.limit, view);
}

/** The tenant's row with this id; 404 for a malformed id, another tenant's row or none. */
export async function ownedRow<T extends object>(
  orm: MikroORM,
  entity: EntityName<T>,
  prefix: IdPrefix,
  id: string,
  tenantId: string,
): Promise<T> {
  if (!isId(prefix, id)) throw notFound();
  const row = (await orm.em.fork().findOne(entity, { id, tenantId } as never)) as T | null;
  if (!row) throw notFound();
  return row;
}
