// The transactional invocation's activities, thin over the domain's performer
// (gateway/invocations/perform.ts): it gets the attempt's heartbeat and cancellation, and its
// refusals to perform become Temporal's failures (their types are in recorded histories).
import { Context } from '@temporalio/activity';
import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import { CredentialUnavailable } from '../gateway/credentials/resolver.ts';
import type { InvocationOutcome } from '../gateway/invocations/store.ts';
import {
  createInvocationPerformer,
  InvocationNotPerformed,
  type Attempt,
  type PerformDeps,
} from '../gateway/invocations/perform.ts';

export type { InvocationOutcome };

export interface InvocationActivities {
  performInvocation(invocationId: string): Promise<InvocationOutcome>;
  /** Marks a row failed when performInvocation itself gave up (its retries exhausted). */
  abandonInvocation(invocationId: string, failureType: string | null): Promise<InvocationOutcome>;
}

/** The failure type an unavailable credential leaves in the history, read by abandonInvocation. */
const CREDENTIAL_UNAVAILABLE = 'CredentialUnavailable';

/** The attempt as the activity's context has it. */
function currentAttempt(): Attempt {
  const context = Context.current();
  return {
    heartbeat: () => Context.current().heartbeat(),
    signal: context.cancellationSignal,
    endedByWorkflow: () => {
      const details = Context.current().cancellationDetails;
      return Boolean(details?.notFound || details?.cancelRequested);
    },
    warn: (message, attributes) => Context.current().log.warn(message, attributes),
  };
}

/** The domain's reasons not to perform, as Temporal's failures; anything else as it is. */
function asFailure(err: unknown): unknown {
  if (err instanceof CredentialUnavailable)
    // Retried only while it may come back.
    return ApplicationFailure.create({
      type: CREDENTIAL_UNAVAILABLE,
      message: err.message,
      nonRetryable: !err.retryable,
    });
  if (!(err instanceof InvocationNotPerformed)) return err;
  switch (err.reason) {
    case 'row_missing':
      // The accept commit writes the row before anything starts the workflow (the route or the
      // start relay), so a missing row was deleted since, or the workflow was started by hand.
      // The attempt fails as benign (logged at debug, not as a failed activity) and is retried
      // until its attempts run out; abandonInvocation then finds no row either.
      return ApplicationFailure.create({
        message: 'invocation row not found yet',
        type: 'InvocationNotFound',
        category: ApplicationFailureCategory.BENIGN,
      });
    case 'agent_missing':
      return ApplicationFailure.retryable('agent of the invocation not found', 'AgentNotFound');
    case 'attempt_leased':
      return ApplicationFailure.retryable('another attempt holds the invocation', 'AttemptLeased');
  }
}

export function createInvocationActivities(deps: PerformDeps): InvocationActivities {
  const performer = createInvocationPerformer(deps);
  return {
    async performInvocation(invocationId) {
      try {
        return await performer.perform(invocationId, currentAttempt());
      } catch (err) {
        throw asFailure(err);
      }
    },
    async abandonInvocation(invocationId, failureType) {
      // performInvocation lets a failure escape on purpose only for an unavailable credential;
      // anything else that exhausted its retries is the gateway's own.
      return performer.abandon(invocationId, failureType === CREDENTIAL_UNAVAILABLE);
    },
  };
}
