// The tenant's settlement configuration: at most one row per tenant (migration
// Migration20261122110000_settlement_config).
import { defineEntity, p } from '@mikro-orm/core';

export const SettlementConfigSchema = defineEntity({
  name: 'SettlementConfig',
  tableName: 'settlement_configs',
  properties: {
    tenantId: p.string().primary(),
    facilitatorUrl: p.string(),
    facilitatorCredentialRef: p.string(),
    /** batch-settlement: how often the tenant's outstanding vouchers are claimed (seconds, at least 10). */
    claimEverySeconds: p.integer().default(300),
    /** batch-settlement: the unclaimed amount (base units) that claims sooner; null: the period only. */
    claimThreshold: p.string().nullable().default(null),
    createdAt: p.datetime(),
    updatedAt: p.datetime(),
  },
});
