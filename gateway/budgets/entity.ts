// The `budgets` and `budget_alert_secrets` tables (Migration20261206160000_budgets): a tenant's
// caps on what its calls spend and how many it makes over a window, and the tenant's secret
// that signs their alerts (envelope-encrypted, gateway/credentials/envelope.ts).
import { defineEntity, p, type InferEntity } from '@mikro-orm/core';
import type { BudgetScope } from './scope.ts';
import type { BudgetWindow } from './windows.ts';

export type BudgetMode = 'hard' | 'soft';

export const BudgetSchema = defineEntity({
  name: 'Budget',
  tableName: 'budgets',
  properties: {
    id: p.string().primary(),
    tenantId: p.string(),
    name: p.string(),
    scope: p.json<BudgetScope>(),
    /** In the asset's smallest unit, a decimal string; null when only calls are capped. */
    limitAmount: p.string().nullable(),
    limitCalls: p.bigint('number').nullable(),
    timeWindow: p.string().$type<BudgetWindow>(),
    mode: p.string().$type<BudgetMode>(),
    alertThresholds: p.json<number[]>().nullable(),
    webhookUrl: p.string().nullable(),
    createdBy: p.string(),
    createdAt: p.datetime(),
    updatedAt: p.datetime(),
  },
});
export type Budget = InferEntity<typeof BudgetSchema>;

export const BudgetAlertSecretSchema = defineEntity({
  name: 'BudgetAlertSecret',
  tableName: 'budget_alert_secrets',
  properties: {
    tenantId: p.string().primary(),
    kekId: p.string(),
    wrappedKey: p.blob(),
    secretCiphertext: p.blob(),
    createdAt: p.datetime(),
  },
});
