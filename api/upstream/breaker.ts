// One circuit breaker per upstream origin (cockatiel). It opens on N consecutive failures OR
// on an error rate over a sliding window, fails calls fast while open, and after a pause lets
// a single probe through (half-open): the probe's success closes it, its failure re-opens it.
// A failure is what says the upstream is unwell: connect errors, timeouts and 5xx answers.
// 4xx answers, SSRF refusals and callers hanging up say nothing about its health.
import { CircuitState, ConsecutiveBreaker, SamplingBreaker, circuitBreaker, handleWhen, type CircuitBreakerPolicy, type IBreaker } from 'cockatiel';
import { recordBreakerState } from '../observability/metrics.ts';
import { UpstreamError } from './errors.ts';

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
    this.sampling = new SamplingBreaker({ threshold: opts.errorRate, duration: opts.windowMs, minimumRps: opts.minimumRps });
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

export class BreakerRegistry {
  private readonly breakers = new Map<string, CircuitBreakerPolicy>();
  private readonly opts: BreakerOptions;
  constructor(opts: Partial<BreakerOptions> = {}) {
    this.opts = { ...DEFAULT_BREAKER, ...opts };
  }

  /** The breaker of the upstream's origin (scheme, host and port). */
  for(url: string): CircuitBreakerPolicy {
    const origin = new URL(url).origin;
    let breaker = this.breakers.get(origin);
    if (!breaker) {
      const policy = handleWhen((err) => err instanceof UpstreamError && UNHEALTHY.has(err.errorClass)).orWhenResult((r) => ((r as { statusCode?: number }).statusCode ?? 0) >= 500);
      breaker = circuitBreaker(policy, { halfOpenAfter: this.opts.halfOpenAfterMs, breaker: new ConsecutiveOrRateBreaker(this.opts) });
      // The gateway_circuit_breaker_state gauge (docs/OBSERVABILITY.md), per upstream host.
      const host = new URL(url).host;
      breaker.onStateChange((s) => recordBreakerState(host, s === CircuitState.Closed ? 'closed' : s === CircuitState.HalfOpen ? 'half_open' : 'open'));
      this.breakers.set(origin, breaker);
    }
    return breaker;
  }

  state(url: string): BreakerState {
    const s = this.for(url).state;
    return s === CircuitState.Closed ? 'closed' : s === CircuitState.HalfOpen ? 'half_open' : 'open';
  }
}
