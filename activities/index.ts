export { createInvocationActivities } from './invocation.ts';
export { createReceiptActivities } from './receipts.ts';
export { createRetentionActivities } from './retention.ts';
export { createChargeActivities } from './charges.ts';
export { createChannelClaimActivities } from './channel-claims.ts';
export { createBudgetAlertActivities } from './budget-alerts.ts';
