// Chooses the limiter: Redis (shared by every replica) when REDIS_URL is set, else memory.
import type { Agent } from '../db/entities.ts';
import { createMemoryLimiter, type Bucket, type RateLimiter } from './limiter.ts';
import { createRedisLimiter } from './redis.ts';

export type { Bucket, Decision, RateLimiter } from './limiter.ts';
export { createMemoryLimiter, retryAfterSeconds } from './limiter.ts';
export { createRedisLimiter } from './redis.ts';

export type RateLimitSettings = {
  /** Per-agent default when the agent sets no rate of its own. */
  agentRps: number;
  agentBurst: number;
  /** One bucket per tenant over all its agents' calls: its share of the gateway, whatever its agents' rates. */
  tenantRps: number;
  tenantBurst: number;
  /** One bucket over every proxied call the deployment takes: a last-resort capacity guard. */
  globalRps: number;
  globalBurst: number;
};

/** The v1 contract: a burst of 20 when the agent sets only its rate. */
const AGENT_DEFAULT_BURST_WITH_RATE = 20;

/**
 * The agent's own burst depth: its override, else 20 when it sets its own rate; null when it
 * sets neither (the deployment's default bucket applies). The API shows this value.
 */
export function ownBurst(agent: Pick<Agent, 'rateLimitRps' | 'rateLimitBurst'>): number | null {
  // PostgreSQL doubles may arrive as strings; a rate is positive when set.
  return agent.rateLimitBurst ?? (Number(agent.rateLimitRps) > 0 ? AGENT_DEFAULT_BURST_WITH_RATE : null);
}

export function createRateLimiter(redisUrl: string | undefined, onError?: (err: Error) => void): RateLimiter {
  return redisUrl ? createRedisLimiter(redisUrl, { onError }) : createMemoryLimiter();
}

/**
 * The buckets one proxied call of this agent takes a token from, all or nothing: its agent's,
 * its tenant's, the global one. The tenant's bucket is what makes the global one fair: a tenant
 * however many agents it has takes at most its tenant rate from the global bucket (a call its
 * own bucket refuses takes nothing from the others), and the tenant rate is below the global
 * one (gateway/config.ts), so the rest stays for the other tenants (docs/PROXY.md "Rate limits").
 */
export function bucketsFor(
  agent: Pick<Agent, 'id' | 'tenantId' | 'rateLimitRps' | 'rateLimitBurst'>,
  settings: RateLimitSettings,
): Bucket[] {
  // PostgreSQL doubles may arrive as strings.
  const ownRate = agent.rateLimitRps == null ? null : Number(agent.rateLimitRps);
  const rate = ownRate ?? settings.agentRps;
  const burst = ownBurst(agent) ?? settings.agentBurst;
  return [
    { key: `agent:${agent.id}`, rate, burst: Math.max(1, burst) },
    { key: `tenant:${agent.tenantId}`, rate: settings.tenantRps, burst: Math.max(1, settings.tenantBurst) },
    { key: 'global', rate: settings.globalRps, burst: Math.max(1, settings.globalBurst) },
  ];
}
