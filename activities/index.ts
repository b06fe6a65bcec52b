export { createInvocationActivities, type InvocationActivities, type InvocationOutcome } from './invocation.ts';
