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
    createdAt: p.datetime(),
    updatedAt: p.datetime(),
  },
});
