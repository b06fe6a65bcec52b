// The long-lived parts the proxy routes share: the upstream client (SSRF-guarded dispatcher,
// breakers), the rate limiter, the body store, the credential resolver, the policy engine,
// the payment gate, the accept commit's statement pool and the agent cache. Built once per app at wiring time
// (api/app.ts); tests pass their own (an empty allow-list with a rebinding resolver, a Redis
// limiter).
import type { AppDeps } from '../deps.ts';
import { createUpstreamClient, type UpstreamClient } from '../../gateway/upstream/client.ts';
import { createOpenCircuits } from '../../gateway/upstream/open-circuits.ts';
import { queryRows } from '../../gateway/db/orm.ts';
import { createRateLimiter, type RateLimiter } from '../../gateway/ratelimit/index.ts';
import { createPostgresBodyStore, type BodyStore } from '../../gateway/body-store.ts';
import { createCredentialResolver, type CredentialResolver } from '../../gateway/credentials/resolver.ts';
import { createInvocationRecorder, type InvocationRecorder } from '../../gateway/invocations/stream-records.ts';
import { createReceiptSigner } from '../../gateway/receipts/signer.ts';
import type { ReceiptFacts } from '../../gateway/receipts/store.ts';
import type { SignedReceipt } from '../../gateway/receipts/signer.ts';
import { createAgentRows, type AgentRows } from '../../gateway/agents/rows.ts';
import { createBodyBudget, type BodyBudget } from './body-budget.ts';
import pLimit, { type LimitFunction } from 'p-limit';
import { createStartBacklog, type StartBacklog } from './start-backlog.ts';
import { createRecentReads, type RecentReads } from './recent-read.ts';
import type { PolicyEngine } from '../../gateway/policy/engine.ts';
import { createAppPolicyEngine } from '../policy/stage.ts';
import { createPaymentGate, type PaymentGate } from '../../gateway/payment/flow.ts';
import { createStatementPool, type StatementPool } from '../../gateway/db/statement-pool.ts';
import { createTaskBindings, type TaskBindings } from '../../gateway/a2a/tasks.ts';
import { createPaymentTasks, type PaymentTasks } from '../../gateway/a2a/payment-tasks.ts';
import { createBudgetParts, type BudgetParts } from '../budgets/parts.ts';

/** Workflow starts in flight at once per process (a start takes a few ms on a healthy server). */
const STARTS_IN_FLIGHT = 32;

export type ProxyParts = {
  upstream: UpstreamClient;
  limiter: RateLimiter;
  bodies: BodyStore;
  credentials: CredentialResolver;
  /** Streaming rows, written with group commit. */
  recorder: InvocationRecorder;
  /** Receipts of streaming calls (emit_receipts), signed as the call completes. */
  signReceipt: (facts: ReceiptFacts) => Promise<SignedReceipt>;
  /** Request-body bytes held in memory, bounded per process and per tenant. */
  bodyBudget: BodyBudget;
  /** Accepted transactional calls whose workflow start is not yet known, bounded; the start relay and /readyz read it. */
  startBacklog: StartBacklog;
  /**
   * The workflow starts this process has in flight at once. The 202 does not wait for its
   * start, so callers could outpace Temporal; beyond this the starts queue here (their calls
   * hold their backlog places) instead of piling onto the server and timing out.
   */
  startQueue: LimitFunction;
  /** Reads of just-minted invocation ids, which wait briefly for a row still on its way. */
  recentReads: RecentReads;
  /** The tenant policies (cache, rate window); the policy routes share it. */
  policy: PolicyEngine;
  /** The payment stage's configuration and facilitator client. */
  payment: PaymentGate;
  /** Prepared statements of the transactional accept commit. */
  statements: StatementPool;
  /** The agents the gate reads (cache); the agent routes forget what they write. */
  agents: AgentRows;
  /** A2A task ids bound to the agent and tenant they were seen through (gateway/a2a/tasks.ts). */
  a2aTasks: TaskBindings;
  /** Messages a public A2A agent asked payment for through the x402 A2A transport (gateway/a2a/payment-tasks.ts). */
  a2aPaymentTasks: PaymentTasks;
  /** The tenants' budgets, their ledger and this process's rounds (api/budgets/parts.ts). */
  budgets: BudgetParts;
};

export function createProxyParts(deps: AppDeps, overrides: Partial<ProxyParts> = {}): ProxyParts {
  return {
    upstream:
      overrides.upstream ??
      createUpstreamClient({
        allow: deps.config.upstream.allow,
        tenantConnections: deps.config.upstream.tenantConnections,
        breaker: { halfOpenAfterMs: deps.config.upstream.breakerHalfOpenMs },
        circuits: createOpenCircuits({ redisUrl: deps.config.redisUrl, query: queryRows(deps.orm), log: deps.log }),
      }),
    limiter:
      overrides.limiter ??
      createRateLimiter(deps.config.redisUrl, (err) =>
        deps.log.warn({ err: err.message }, 'rate limiter unavailable; admitting calls'),
      ),
    bodies: overrides.bodies ?? createPostgresBodyStore(deps.orm),
    credentials: overrides.credentials ?? createCredentialResolver(deps.orm, deps.config.vault, deps.vaultClient),
    recorder: overrides.recorder ?? createInvocationRecorder(deps.orm),
    signReceipt: overrides.signReceipt ?? createReceiptSigner(deps.config.receipts),
    bodyBudget: overrides.bodyBudget ?? createBodyBudget(deps.config.bodyBudget),
    startBacklog: overrides.startBacklog ?? createStartBacklog(deps.config.startBacklog),
    startQueue: overrides.startQueue ?? pLimit(STARTS_IN_FLIGHT),
    recentReads: overrides.recentReads ?? createRecentReads(),
    policy: overrides.policy ?? createAppPolicyEngine(deps),
    // Before the payment gate: the pool closes after it (closeWithOrm closes the last made
    // first), so the channel charges its holders commit as they stop are still written.
    statements: overrides.statements ?? createStatementPool(deps.orm),
    payment:
      overrides.payment ??
      createPaymentGate(deps.config.payment, deps.config.upstream.allow, deps.feed, deps.orm, deps.log),
    agents: overrides.agents ?? createAgentRows(deps.orm, deps.feed),
    a2aTasks: overrides.a2aTasks ?? createTaskBindings(queryRows(deps.orm)),
    a2aPaymentTasks: overrides.a2aPaymentTasks ?? createPaymentTasks(queryRows(deps.orm)),
    budgets: overrides.budgets ?? createBudgetParts(deps),
  };
}
