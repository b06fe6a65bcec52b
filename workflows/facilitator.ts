// Everything the facilitator worker registers (task queue `facilitator`). Only deterministic
// code may be imported here.
export { SettlementWorkflow, SettlementWatchWorkflow } from './settlement.ts';
