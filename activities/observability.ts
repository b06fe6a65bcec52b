// The gateway worker's observability: an activity interceptor that logs each invocation
// activity with its invocation id (the workflow id) and records the upstream outcome
// metrics, without the activities having to know about either. Ids and figures only.
import type { ActivityInterceptorsFactory } from '@temporalio/worker';
import type { Logger } from '../lib/log.ts';
import { activeTraceId } from '../lib/observability/spans.ts';
import { recordUpstreamOutcome } from '../gateway/metrics.ts';
import type { InvocationActivities } from './invocation.ts';

type Outcome = {
  status?: string;
  errorClass?: string | null;
  latencyMs?: number | null;
  upstreamStatus?: number | null;
};

/** Activities whose result is an invocation's final outcome. */
const OUTCOME_ACTIVITIES = new Set<string>([
  'performInvocation',
  'abandonInvocation',
] satisfies (keyof InvocationActivities)[]);

export function activityObservability(log: Logger): ActivityInterceptorsFactory {
  return (ctx) => ({
    inbound: {
      async execute(input, next) {
        const { activityType, attempt, workflowExecution } = ctx.info;
        const invocationId = workflowExecution?.workflowId;
        const traceId = activeTraceId();
        const started = performance.now();
        try {
          const result = await next(input);
          const durationMs = Math.round(performance.now() - started);
          if (OUTCOME_ACTIVITIES.has(activityType)) {
            const outcome = (result ?? {}) as Outcome;
            recordUpstreamOutcome('transactional', outcome.errorClass ?? null, outcome.latencyMs ?? null);
            log.info(
              {
                invocationId,
                traceId,
                activity: activityType,
                attempt,
                durationMs,
                status: outcome.status,
                upstreamStatus: outcome.upstreamStatus,
                errorClass: outcome.errorClass,
              },
              'invocation completed',
            );
          } else {
            log.info({ invocationId, traceId, activity: activityType, attempt, durationMs }, 'activity completed');
          }
          return result;
        } catch (err) {
          // The failure's type and message only: activity errors are classified, never raw upstream text.
          log.warn(
            {
              invocationId,
              traceId,
              activity: activityType,
              attempt,
              err: { name: (err as Error).name, message: (err as Error).message },
            },
            'activity failed',
          );
          throw err;
        }
      },
    },
  });
}
