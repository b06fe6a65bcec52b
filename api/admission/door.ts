// Where a proxied call comes in, and what its door hands the rest of admission: /v1 with a
// bearer token (token-door.ts) or a public agent's URL, paid by any x402 client (public-door.ts).
// Both then pass the same stages (admit.ts), record and receipt.
import type { Context } from 'koa';
import type { Agent } from '../../gateway/db/entities.ts';
import type { AuthState, Caller } from '../auth.ts';
import type { ProxyCall } from '../proxy/call.ts';
import type { DoorVerdict } from '../../gateway/budgets/gate.ts';

export type Admitted = {
  agent: Agent;
  /** Who the call is from. A public call's is completed from its payment by `identify`, before policy. */
  caller: Caller;
  requestId: string;
  model: string | null;
  /** Returns the call's rate-limit tokens; at most once. */
  giveBack(): Promise<void>;
  /** The call's id, when its door made a step that names it (its budget reservation: token-door.ts). */
  invocationId?: string;
  /**
   * The budget verdict of a reservation made with the door's rate-limit step, for the budget
   * stage to tell (stages/budget.ts), and the amount it reserved; absent: the stage reserves.
   */
  budget?: { verdict: DoorVerdict; amount: bigint };
  /** Runs before policy once the call's facts are known: a public call's payer becomes `call.caller` (public-door.ts). */
  identify?(call: ProxyCall): Promise<void>;
  /** Runs once the payment stage accepted the call's payment (public-door.ts: the client's attempt token comes back). */
  settled?(): Promise<void>;
  /**
   * The door's own answer of the payment stage's refusal, or the refusal unchanged (public-door.ts:
   * a payment asked again under the x402 A2A transport keeps its message for the next payment).
   */
  refused?(call: ProxyCall, err: unknown): Promise<unknown>;
};

/**
 * A proxied call's context, either door: /v1 (the token's caller in state) or a public agent's
 * URL. `state.call` is the call as admission knows it once its facts are gathered (admit.ts),
 * there for an endpoint that answers a later refusal in its own way.
 */
export type CallCtx = Context & {
  state: Partial<AuthState> & { call?: ProxyCall };
  params: Record<string, string>;
};

export type Door = {
  /** The door's agent and rate-limit stages: the agent the URL names, the caller, its tokens taken. */
  admit(ctx: CallCtx): Promise<Admitted>;
  /** The 202 of a transactional call hands out a poll capability (the caller has no token to poll with). */
  issuesPollKeys: boolean;
  /** The door speaks the x402 A2A transport (api/proxy/a2a-x402.ts): the public one. */
  speaksA2aPayments?: boolean;
};
