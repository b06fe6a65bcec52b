// One page of a tenant's rows for the management lists, and one row by id. Ids are UUIDv7, so
// id order is creation order and a page boundary never shifts when rows are added; the door
// parses `limit` and the opaque `cursor` into a Page (api/pagination.ts).
import type { EntityName } from '@mikro-orm/core';
import { isId, type IdPrefix } from '../../lib/ids.ts';
import { absent } from '../refusal.ts';
import type { GatewayDb } from './orm.ts';

/** At most `limit` rows after the id `after` (none: from the first). */
export type Page = { limit: number; after: string | undefined };

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
  db: GatewayDb,
  entity: EntityName<T>,
  where: Record<string, unknown>,
  page: Page,
  view: (row: T) => V,
): Promise<{ data: V[]; next_cursor: string | null }> {
  const filter = page.after ? { ...where, id: { $gt: page.after } } : where;
  const rows = (await db.em
    .fork()
    .find(entity, filter as never, { orderBy: { id: 'asc' } as never, limit: page.limit + 1 })) as T[];
  return pageRows(rows, page.limit, view);
}

/** The tenant's row with this id; absent for a malformed id, another tenant's row or none. */
export async function ownedRow<T extends object>(
  db: GatewayDb,
  entity: EntityName<T>,
  prefix: IdPrefix,
  id: string,
  tenantId: string,
): Promise<T> {
  if (!isId(prefix, id)) throw absent();
  const row = (await db.em.fork().findOne(entity, { id, tenantId } as never)) as T | null;
  if (!row) throw absent();
  return row;
}
