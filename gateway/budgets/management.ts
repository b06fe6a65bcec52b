// The tenant's budgets as the management API writes them (api/routes/budgets.ts maps HTTP to
// these). Names are unique in the tenant; a limit keeps at least one of amount and calls. A
// change is in force on every replica's cache (reads.ts) before it resolves. The tenant's alert
// secret is made with its first budget that alerts, and handed back that once (alerts.ts).
import { LockMode } from '@mikro-orm/core';
import { newId, isId } from '../../lib/ids.ts';
import type { GatewayDb } from '../db/orm.ts';
import type { ChangeFeed } from '../db/change-feed.ts';
import type { Keyring } from '../credentials/config.ts';
import { listPage, ownedRow, type Page } from '../db/pages.ts';
import { absent, flushOrConflict, invalid } from '../refusal.ts';
import { BudgetSchema, type Budget, type BudgetMode } from './entity.ts';
import { ensureAlertSecret } from './alerts.ts';
import type { BudgetScope } from './scope.ts';
import type { BudgetWindow } from './windows.ts';

const NAME_TAKEN = 'a budget with this name already exists';

export type BudgetAlerts = { thresholds: number[]; webhookUrl: string };
export type BudgetLimit = { amount: string | null; calls: number | null };

export type NewBudget = {
  name: string;
  scope: BudgetScope;
  limit: BudgetLimit;
  window: BudgetWindow;
  mode: BudgetMode;
  alerts: BudgetAlerts | null;
};

export type BudgetPatch = Partial<NewBudget> & { touched: boolean };

function setAlerts(row: Budget, alerts: BudgetAlerts | null): void {
  row.alertThresholds = alerts ? [...alerts.thresholds].sort((a, b) => a - b) : null;
  row.webhookUrl = alerts?.webhookUrl ?? null;
}

function setLimit(row: Budget, limit: BudgetLimit): void {
  if (limit.amount === null && limit.calls === null) throw invalid('limit must set amount, calls or both');
  row.limitAmount = limit.amount;
  row.limitCalls = limit.calls;
}

export function createBudgetManagement(db: GatewayDb, feed: ChangeFeed, keyring: Keyring) {
  const published = async (tenantId: string) => {
    feed.invalidate(`budget:${tenantId}`);
    await feed.publish();
  };
  return {
    /** The budget, and the tenant's alert secret when this budget made it. */
    async create(
      tenantId: string,
      createdBy: string,
      fields: NewBudget,
    ): Promise<{ row: Budget; secret: string | null }> {
      const em = db.em.fork();
      const now = new Date();
      const row = em.create(BudgetSchema, {
        id: newId('bud'),
        tenantId,
        name: fields.name,
        scope: fields.scope,
        limitAmount: null,
        limitCalls: null,
        timeWindow: fields.window,
        mode: fields.mode,
        alertThresholds: null,
        webhookUrl: null,
        createdBy,
        createdAt: now,
        updatedAt: now,
      });
      setLimit(row, fields.limit);
      setAlerts(row, fields.alerts);
      await flushOrConflict(em, NAME_TAKEN);
      const secret = fields.alerts ? await ensureAlertSecret(db, keyring, tenantId) : null;
      await published(tenantId);
      return { row, secret };
    },

    list<V>(tenantId: string, page: Page, view: (row: Budget) => V) {
      return listPage(db, BudgetSchema, { tenantId }, page, view);
    },

    get(tenantId: string, id: string): Promise<Budget> {
      return ownedRow(db, BudgetSchema, 'bud', id, tenantId);
    },

    /** Updates the budget, row-locked; `patchOf` (which may refuse) reads the body once it is found. */
    async update(
      tenantId: string,
      id: string,
      patchOf: () => BudgetPatch,
    ): Promise<{ row: Budget; secret: string | null }> {
      if (!isId('bud', id)) throw absent();
      let alerting = false;
      const row = await db.em.fork().transactional(async (em) => {
        const current = await em.findOne(BudgetSchema, { id, tenantId }, { lockMode: LockMode.PESSIMISTIC_WRITE });
        if (!current) throw absent();
        const patch = patchOf();
        if (patch.name !== undefined) current.name = patch.name;
        if (patch.scope !== undefined) current.scope = patch.scope;
        if (patch.limit !== undefined) setLimit(current, patch.limit);
        if (patch.window !== undefined) current.timeWindow = patch.window;
        if (patch.mode !== undefined) current.mode = patch.mode;
        if (patch.alerts !== undefined) setAlerts(current, patch.alerts);
        alerting = !!patch.alerts;
        if (patch.touched) current.updatedAt = new Date();
        await flushOrConflict(em, NAME_TAKEN);
        return current;
      });
      const secret = alerting ? await ensureAlertSecret(db, keyring, tenantId) : null;
      await published(tenantId);
      return { row, secret };
    },

    async remove(tenantId: string, id: string): Promise<void> {
      if (!isId('bud', id)) throw absent();
      const removed = await db.em.fork().nativeDelete(BudgetSchema, { id, tenantId });
      if (removed === 0) throw absent();
      await published(tenantId);
    },
  };
}
