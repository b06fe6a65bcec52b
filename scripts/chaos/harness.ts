// What a chaos scenario imports: the one import that gives it a system to break, the load to
// drive through it and the checks to report with. Each concern lives in its own module:
// system.ts (an isolated system and its infrastructure), processes.ts (the application
// processes), upstream.ts (the counting upstream), calls.ts (agents, calls and their outcomes)
// and report.ts (the scenario contract, checks and tallies).
export { withSystem, startSystem, type ChaosSystem, type ChaosSystemOptions } from './system.ts';
export type { AppName, AppProcess } from './processes.ts';
export { startCountingUpstream, type CountingUpstream, type UpstreamMode } from './upstream.ts';
export {
  awaitTerminal,
  awaitWorkflow,
  createAgent,
  getInvocation,
  invoke,
  invokeStream,
  runPool,
  type Caller,
  type InvocationView,
  type InvokeResult,
} from './calls.ts';
export { check, formatTally, tally, type ChaosScenario } from './report.ts';
