// One circuit breaker per tenant and upstream origin (cockatiel). It opens on N consecutive failures OR
// on an error rate over a sliding window, fails calls fast while open, and after a pause lets
// a single probe through (half-open): the probe's success closes it, its failure re-opens it.
// A failure is what says the upstream is unwell: connect errors, timeouts and 5xx answers.
// 4xx answers, SSRF refusals and callers hanging up say nothing about its health.
import {
  CircuitState,
  ConsecutiveBreaker,
  SamplingBreaker,
  circuitBreaker,
  handleWhen,
  type CircuitBreakerPolicy,
  type IBreaker,
} from 'cockatiel';
import { recordBreakerTransition } from '../metrics.ts';
import { UpstreamError } from './errors.ts';
import { circuitKey, createOpenCircuits, type OpenCircuits } from './open-circuits.ts';

export type BreakerOptions = {
  /** Open after this many consecutive failures. */
  consecutiveFailures: number;
  /** Open when more than this share of calls failed within `windowMs` ... */
  errorRate: number;
  windowMs: number;
  /** ... provided at least this many calls per second were seen (no opening on a trickle). */
  minimumRps: number;
  /** How long the circuit stays open before a half-open probe is let through. */
  halfOpenAfterMs: number;
};

export const DEFAULT_BREAKER: BreakerOptions = {
  consecutiveFailures: 5,
  errorRate: 0.5,
  windowMs: 30_000,
  minimumRps: 1,
  halfOpenAfterMs: 10_000,
};

/** Opens when either of its two breakers would. */
class ConsecutiveOrRateBreaker implements IBreaker {
  private readonly consecutive: ConsecutiveBreaker;
  private readonly sampling: SamplingBreaker;
  constructor(opts: BreakerOptions) {
    this.consecutive = new ConsecutiveBreaker(opts.consecutiveFailures);
    this.sampling = new SamplingBreaker({
      threshold: opts.errorRate,
      duration: opts.windowMs,
      minimumRps: opts.minimumRps,
    });
  }
  get state(): unknown {
    return { consecutive: this.consecutive.state, sampling: this.sampling.state };
  }
  set state(value: unknown) {
    const v = value as { consecutive: number; sampling: unknown };
    this.consecutive.state = v.consecutive;
    this.sampling.state = v.sampling;
  }
  success(state: CircuitState): void {
    this.consecutive.success();
    this.sampling.success(state);
  }
  failure(state: CircuitState): boolean {
    const byCount = this.consecutive.failure();
    const byRate = this.sampling.failure(state);
    return byCount || byRate;
  }
}

const UNHEALTHY = new Set(['connect', 'timeout']);

export type BreakerState = 'closed' | 'open' | 'half_open';

/** At most this many breakers per process; the least recently used go first. */
const MAX_BREAKERS = 10_000;
/** A breaker unused this long is dropped (it would have closed by then anyway). */
const BREAKER_IDLE_MS = 10 * 60_000;

type Entry = { policy: CircuitBreakerPolicy; state: BreakerState; usedAt: number };

const stateOf = (s: CircuitState): BreakerState =>
  s === CircuitState.Closed ? 'closed' : s === CircuitState.HalfOpen ? 'half_open' : 'open';

/**
 * One breaker per tenant and upstream origin: a tenant driving failures at an origin opens its
 * own circuit only, never another tenant's agents on that origin. The map is kept in order of
 * use and bounded: idle entries and, past MAX_BREAKERS, the least recently used are dropped.
 */
export class BreakerRegistry {
  private readonly breakers = new Map<string, Entry>();
  private readonly opts: BreakerOptions;
  /** The bounds, and the clock idleness is measured on (a test passes its own). */
  private readonly limits: { max: number; idleMs: number; now: () => number };
  /** Where openings are announced, for the payment gate (open-circuits.ts). */
  readonly circuits: OpenCircuits;
  constructor(
    opts: Partial<BreakerOptions> = {},
    limits: Partial<{ max: number; idleMs: number; now: () => number }> = {},
    circuits: OpenCircuits = createOpenCircuits(),
  ) {
    this.opts = { ...DEFAULT_BREAKER, ...opts };
    this.limits = { max: MAX_BREAKERS, idleMs: BREAKER_IDLE_MS, now: () => performance.now(), ...limits };
    this.circuits = circuits;
  }

  get size(): number {
    return this.breakers.size;
  }

  /** The breaker of this tenant's calls to the upstream's origin (scheme, host and port). */
  for(url: string, tenantId = ''): CircuitBreakerPolicy {
    const key = circuitKey(url, tenantId);
    const now = this.limits.now();
    let entry = this.breakers.get(key);
    if (entry) {
      this.breakers.delete(key); // re-inserted below: the map stays in order of use
    } else {
      const policy = handleWhen((err) => err instanceof UpstreamError && UNHEALTHY.has(err.errorClass)).orWhenResult(
        (r) => ((r as { statusCode?: number }).statusCode ?? 0) >= 500,
      );
      const created: Entry = {
        policy: circuitBreaker(policy, {
          halfOpenAfter: this.opts.halfOpenAfterMs,
          breaker: new ConsecutiveOrRateBreaker(this.opts),
        }),
        state: 'closed',
        usedAt: now,
      };
      // The gateway_circuit_breakers gauge (docs/OBSERVABILITY.md) counts breakers by state.
      recordBreakerTransition(null, 'closed');
      created.policy.onStateChange((s) => {
        const next = stateOf(s);
        recordBreakerTransition(created.state, next);
        created.state = next;
        // Announced for the open period only: half-open and closed need no word (open-circuits.ts).
        if (next === 'open') this.circuits.opened(key, this.opts.halfOpenAfterMs);
      });
      entry = created;
      this.trim(now);
    }
    entry.usedAt = now;
    this.breakers.set(key, entry);
    return entry.policy;
  }

  state(url: string, tenantId = ''): BreakerState {
    return stateOf(this.for(url, tenantId).state);
  }

  /** Drops idle breakers from the old end, and the oldest beyond the bound. */
  private trim(now: number): void {
    for (const [key, entry] of this.breakers) {
      if (this.breakers.size < this.limits.max && now - entry.usedAt < this.limits.idleMs) break;
      this.breakers.delete(key);
      recordBreakerTransition(entry.state, null);
    }
  }
}
