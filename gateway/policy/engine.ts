// The policy engine of one API process: the tenant's current document (from the store's cache,
// which the change feed keeps true on every replica: gateway/policy/store.ts), the caller rate
// window, evaluation, and the decision record. A replace on any replica is in force for the
// next call on every replica, and an unreachable store fails the call.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from '../../lib/log.ts';
import type { ChangeFeed } from '../db/change-feed.ts';
import { policyDecisions } from '../metrics.ts';
import { evaluatePolicy, type CallFacts, type Verdict } from './evaluate.ts';
import { createMemoryRateWindow, createRedisRateWindow, type RateWindow } from './rate.ts';
import { createPolicyStore, type DecisionRecord, type PolicyStore } from './store.ts';
import { redisClient } from './redis.ts';

type PolicySubject = CallFacts & {
  tenantId: string;
  userId: string;
  protocol: string;
  /** The id the call's invocation gets if it goes on; recorded on the decision unless it is a deny. */
  invocationId?: string | null;
};

export type PolicyEngine = {
  store: PolicyStore;
  /**
   * The verdict for one call, recorded as a decision (by `record`, the store's insert unless
   * the caller writes it itself); null when the tenant has no policy. Throws when the store is unavailable.
   */
  decide(subject: PolicySubject, record?: (decision: DecisionRecord) => Promise<unknown>): Promise<Verdict | null>;
  /**
   * Whether a call with these facts would be denied, asked without recording a decision or
   * counting toward the caller's rate (a rate rule reads no traffic): what a virtual MCP server
   * asks of each tool before it lists it (api/mcp-servers/). False when the tenant has no policy.
   */
  wouldDeny(tenantId: string, facts: CallFacts): Promise<boolean>;
};

export function createPolicyEngine(opts: {
  orm: MikroORM;
  feed: ChangeFeed;
  redisUrl?: string;
  log: Logger;
}): PolicyEngine {
  const store = createPolicyStore(opts.orm, opts.feed);
  const rates: RateWindow = opts.redisUrl
    ? createRedisRateWindow(redisClient(opts.redisUrl, opts.log))
    : createMemoryRateWindow();

  return {
    store,
    async decide(subject, record = store.recordDecision) {
      // Every call counts toward its caller's rate, whether or not a rule asks for it now,
      // so a rate rule added later sees the true last minute. Started first: it overlaps
      // the version read, and only a rule that needs it waits for it.
      const rate = rates.hit(JSON.stringify([subject.tenantId, subject.userId]));
      rate.catch(() => undefined);

      const policy = await store.current(subject.tenantId);
      if (!policy) return null;
      const verdict = await evaluatePolicy(policy.document, subject, () => rate);
      await record({
        tenantId: subject.tenantId,
        agentId: subject.agentId,
        protocol: subject.protocol,
        mcpTool: subject.tool,
        action: verdict.action,
        matchedRule: verdict.matchedRule,
        reason: verdict.reason,
        invocationId: verdict.action === 'deny' ? null : (subject.invocationId ?? null),
      });
      policyDecisions.inc({ action: verdict.action, source: verdict.source });
      return verdict;
    },
    async wouldDeny(tenantId, facts) {
      const policy = await store.current(tenantId);
      if (!policy) return false;
      return (await evaluatePolicy(policy.document, facts, async () => 0)).action === 'deny';
    },
  };
}
