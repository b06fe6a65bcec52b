export { createInvocationActivities, type InvocationActivities, type InvocationOutcome } from './invocation.ts';
export { createReceiptActivities, type ReceiptActivities } from './receipts.ts';
