// Cursor pagination for the management lists: `limit` (clamped to 1..100, default 20) and an
// opaque `cursor` that encodes the last id of the previous page. Ids are UUIDv7, so id order
// is creation order and a page boundary never shifts when rows are added.
import type { EntityName, MikroORM } from '@mikro-orm/core';
import { badRequest, notFound } from './errors.ts';
import { isId, type IdPrefix } from '../lib/ids.ts';

const DEFAULT_LIMIT = 20;
const MAX_LIMIT = 100;

export type Page = { limit: number; after: string | undefined };

function single(value: string | string[] | undefined, name: string): string | undefined {
  if (Array.isArray(value)) throw badRequest(`${name} may be given once`);
  return value;
}

export function parsePage(query: Record<string, string | string[] | undefined>, prefix: IdPrefix): Page {
  const rawLimit = single(query.limit, 'limit');
  let limit = DEFAULT_LIMIT;
  if (rawLimit !== undefined) {
    if (!/^-?\d{1,9}$/.test(rawLimit)) throw badRequest('limit must be an integer');
    limit = Math.min(MAX_LIMIT, Math.max(1, Number(rawLimit)));
  }
  const rawCursor = single(query.cursor, 'cursor');
  let after: string | undefined;
  if (rawCursor !== undefined) {
    after = Buffer.from(rawCursor, 'base64url').toString('utf8');
    if (!isId(prefix, after)) throw badRequest('invalid cursor');
  }
  return { limit, after };
}

/** Rows were fetched with limit + 1: the extra one only says whether another page exists. */
function pageOf<T extends { id: string }, V>(
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
  return pageOf(rows, page.limit, view);
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
