export { createInvocationActivities, type InvocationActivities, type InvocationOutcome } from './invocation.ts';
export { createReceiptActivities, type ReceiptActivities } from './receipts.ts';
export { createRetentionActivities, type RetentionActivities } from './retention.ts';
