// Everything the gateway worker registers. Only deterministic code may be imported here.
export { InvocationWorkflow } from './invocation.ts';
export { PolicyDecisionRetentionWorkflow } from './retention.ts';
export { MeteredChargeWorkflow } from './charge.ts';
export { ChannelClaimWorkflow } from './channel-claims.ts';
export { BudgetAlertWorkflow } from './budget-alert.ts';
