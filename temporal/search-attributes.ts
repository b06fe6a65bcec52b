// Custom search attributes: what makes the Temporal Web UI the operator's console.
// Registered when the dev server starts (scripts/dev/temporal-dev-server.ts); imported by workflows too,
// so this module stays free of I/O.
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const TenantId = defineSearchAttributeKey('TenantId', SearchAttributeType.KEYWORD);
export const AgentId = defineSearchAttributeKey('AgentId', SearchAttributeType.KEYWORD);
export const InvocationStatus = defineSearchAttributeKey('InvocationStatus', SearchAttributeType.KEYWORD);
export const ErrorClass = defineSearchAttributeKey('ErrorClass', SearchAttributeType.KEYWORD);
export const Payer = defineSearchAttributeKey('Payer', SearchAttributeType.KEYWORD);
export const TxHash = defineSearchAttributeKey('TxHash', SearchAttributeType.KEYWORD);
export const SettlementStatus = defineSearchAttributeKey('SettlementStatus', SearchAttributeType.KEYWORD);

export const ALL_SEARCH_ATTRIBUTES = [TenantId, AgentId, InvocationStatus, ErrorClass, Payer, TxHash, SettlementStatus];
