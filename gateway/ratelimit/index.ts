// Chooses the limiter: Redis (shared by every replica) when REDIS_URL is set, else memory.
import type { Agent } from '../db/entities.ts';
import { createMemoryLimiter, type Bucket, type RateLimiter } from './limiter.ts';
import { createRedisLimiter } from './redis.ts';

export type { Bucket, RateLimiter } from './limiter.ts';
export { createMemoryLimiter, retryAfterSeconds } from './limiter.ts';
export { createRedisLimiter } from './redis.ts';

export type RateLimitSettings = {
  /** Per-agent default when the agent sets no rate of its own. */
  agentRps: number;
  agentBurst: number;
  /** One bucket over every proxied call the deployment takes. */
  globalRps: number;
  globalBurst: number;
};

/** The v1 contract: a burst of 20 when the agent sets only its rate. */
const AGENT_DEFAULT_BURST_WITH_RATE = 20;

export function createRateLimiter(redisUrl: string | undefined, onError?: (err: Error) => void): RateLimiter {
  return redisUrl ? createRedisLimiter(redisUrl, { onError }) : createMemoryLimiter();
}

/** The buckets one proxied call of this agent takes a token from. */
export function bucketsFor(
  agent: Pick<Agent, 'id' | 'rateLimitRps' | 'rateLimitBurst'>,
  settings: RateLimitSettings,
): Bucket[] {
  // PostgreSQL doubles may arrive as strings.
  const ownRate = agent.rateLimitRps == null ? null : Number(agent.rateLimitRps);
  const rate = ownRate ?? settings.agentRps;
  const burst = agent.rateLimitBurst ?? (ownRate ? AGENT_DEFAULT_BURST_WITH_RATE : settings.agentBurst);
  return [
    { key: `agent:${agent.id}`, rate, burst: Math.max(1, burst) },
    { key: 'global', rate: settings.globalRps, burst: Math.max(1, settings.globalBurst) },
  ];
}
