// The settlement activities: Temporal adapters over the facilitator's settlement steps as this
// process runs them (facilitator/settlement/run-cache.ts: a fast-path run's result when one
// reached the step, else the step itself). They add the give-up rule before signing (it needs
// the activity's schedule time), the watcher's heartbeat, and failures that name only their
// kind.
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { CachedSteps } from '../../facilitator/settlement/run-cache.ts';
import type { Decided, SettlementOutcome } from '../../facilitator/settlement/types.ts';
import { errorKind } from '../../lib/error-kind.ts';
import type { Prepared, SettlementActivities } from './types.ts';

/** Before any bytes are signed, verify and reserve give up after this long (nothing can be on chain). */
const GIVE_UP_BEFORE_SIGNING_MS = 5 * 60_000;

export function createSettlementActivities(steps: CachedSteps): SettlementActivities {
  /**
   * A step before signing: when it cannot complete (database or RPC outage) for five minutes,
   * a plain failure, but only when nothing was signed (else it keeps retrying: stored bytes
   * must be delivered, or their gas nonce would stall the wallet). Durable before it is given.
   */
  async function beforeSigning<T>(key: string, run: () => Promise<T>): Promise<T | Decided> {
    try {
      return await run();
    } catch (err) {
      const { scheduledTimestampMs } = Context.current().info;
      if (Date.now() - scheduledTimestampMs < GIVE_UP_BEFORE_SIGNING_MS || !(await steps.nothingSigned(key))) throw err;
      return steps.giveUp(key).catch(() => {
        throw err;
      });
    }
  }

  const verifySettlement = (key: string) => beforeSigning(key, () => steps.verify(key));
  // Step 2, the nonce reservation; `claimSettlement` is its activity's name in recorded histories.
  const claimSettlement = (key: string) => beforeSigning(key, () => steps.reserve(key));
  const broadcastSettlement = (key: string) => steps.broadcast(key);
  const confirmSettlement = (key: string, inclusionTimeoutMs: number) => steps.confirm(key, inclusionTimeoutMs);

  /** Verify and reserve, for the activities of runs started before the per-step workflow. */
  async function prepare(key: string): Promise<Prepared> {
    const verified = await verifySettlement(key);
    const reserved = verified.step === 'verified' ? await claimSettlement(key) : verified;
    return reserved.step === 'decided' ? { step: 'final', outcome: reserved.outcome } : reserved;
  }

  async function deliver(key: string, inclusionTimeoutMs: number): Promise<SettlementOutcome> {
    const sent = await broadcastSettlement(key);
    return sent.step === 'decided' ? sent.outcome : confirmSettlement(key, inclusionTimeoutMs);
  }

  return withCoarseFailures({
    verifySettlement,
    claimSettlement,
    broadcastSettlement,
    confirmSettlement,
    watchSettlement: (key) => {
      const context = Context.current();
      return steps.watch(key, () => context.heartbeat());
    },
    async settle(key, inclusionTimeoutMs) {
      const prepared = await prepare(key);
      return prepared.step === 'final' ? prepared.outcome : deliver(key, inclusionTimeoutMs);
    },
    prepareSettlement: prepare,
    deliverSettlement: deliver,
  });
}

/**
 * What leaves an activity as a failure reaches the workflow history, the SDK's log and, with
 * tracing on, a span: every failure is replaced at this boundary by one that names only its
 * kind (error-kind.ts); the retry decision is kept.
 */
function withCoarseFailures(activities: SettlementActivities): SettlementActivities {
  const coarse = (err: unknown): ApplicationFailure => {
    const type = err instanceof ApplicationFailure ? (err.type ?? 'Error') : (err as Error)?.name || 'Error';
    const message = errorKind(err, type);
    return err instanceof ApplicationFailure && err.nonRetryable
      ? ApplicationFailure.nonRetryable(message, type)
      : ApplicationFailure.retryable(message, type);
  };
  return Object.fromEntries(
    Object.entries(activities).map(([name, run]) => [
      name,
      async (...args: unknown[]) => {
        try {
          return await (run as (...a: unknown[]) => Promise<unknown>)(...args);
        } catch (err) {
          throw coarse(err);
        }
      },
    ]),
  ) as unknown as SettlementActivities;
}

export type { SettlementActivities } from './types.ts';
