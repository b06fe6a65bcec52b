// The policy engine of one API process: the tenant's document cached by version, the caller
// rate window, evaluation, and the decision record. Each call costs one primary-key read of
// the version (the document travels only when it changed), so a replace on any replica is
// in force for the next call on every replica, and an unreachable store fails the call.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Logger } from '../log.ts';
import { policyDecisions } from '../observability/metrics.ts';
import { evaluatePolicy, type CallFacts, type Verdict } from './evaluate.ts';
import { createMemoryRateWindow, createRedisRateWindow, type RateWindow } from './rate.ts';
import { createPolicyStore, type DecisionRecord, type PolicyStore } from './store.ts';
import { redisClient } from './redis.ts';

export type PolicySubject = CallFacts & { tenantId: string; userId: string; protocol: string };

export type PolicyEngine = {
  store: PolicyStore;
  /**
   * The verdict for one call, recorded as a decision (by `record`, the store's insert unless
   * the caller writes it itself); null when the tenant has no policy. Throws when the store is unavailable.
   */
  decide(subject: PolicySubject, record?: (decision: DecisionRecord) => Promise<unknown>): Promise<Verdict | null>;
};

export function createPolicyEngine(opts: { orm: MikroORM; redisUrl?: string; log: Logger }): PolicyEngine {
  const store = createPolicyStore(opts.orm);
  const rates: RateWindow = opts.redisUrl ? createRedisRateWindow(redisClient(opts.redisUrl, opts.log)) : createMemoryRateWindow();
  const cache = new Map<string, { version: number; document: unknown }>();

  return {
    store,
    async decide(subject, record = store.recordDecision) {
      // Every call counts toward its caller's rate, whether or not a rule asks for it now,
      // so a rate rule added later sees the true last minute. Started first: it overlaps
      // the version read, and only a rule that needs it waits for it.
      const rate = rates.hit(JSON.stringify([subject.tenantId, subject.userId]));
      rate.catch(() => undefined);

      const cached = cache.get(subject.tenantId);
      const probe = await store.probe(subject.tenantId, cached?.version ?? null);
      if (!probe) {
        cache.delete(subject.tenantId);
        return null;
      }
      let document = probe.document;
      if (document === null && cached?.version === probe.version) document = cached.document;
      else cache.set(subject.tenantId, { version: probe.version, document });

      const verdict = await evaluatePolicy(document, subject, () => rate);
      await record({
        tenantId: subject.tenantId,
        agentId: subject.agentId,
        protocol: subject.protocol,
        mcpTool: subject.tool,
        action: verdict.action,
        matchedRule: verdict.matchedRule,
        reason: verdict.reason,
      });
      policyDecisions.inc({ action: verdict.action, source: verdict.source });
      return verdict;
    },
  };
}
