// The last part of every scheme's /settle handling: a request that passed the scheme's checks is
// handed to the settlement's owner (facilitator/settlement/: the steps SettlementWorkflow runs),
// and what it answers becomes the scheme's answer.
import { errorKind } from '../../lib/error-kind.ts';
import type { Account } from '../accounts.ts';
import type { Reads } from '../settlement/steps.ts';
import type { SettlementRequest } from '../settlement/request.ts';
import type { SettlementOutcome } from '../settlement/types.ts';
import type { SchemeDeps, SettleAnswer } from './scheme.ts';

export async function handOver(
  deps: SchemeDeps,
  settling: { key: string; account: Account; request: SettlementRequest; deadline: number; reads?: Reads },
): Promise<SettleAnswer> {
  const { key, account, request, deadline, reads } = settling;
  let outcome: SettlementOutcome | 'in_flight';
  try {
    outcome = await deps.settlements.settle(key, account.id, request, deadline, reads);
  } catch (err) {
    // PostgreSQL or Temporal unreachable: a protocol failure the caller may retry (the
    // settlement, if it started, goes on and dedupes the retry).
    deps.log.warn({ key, err: errorKind(err) }, 'settle could not be handed over');
    return { answer: 'unavailable' };
  }
  // Not mined yet (neither the transfer nor its cancel): not a collection outcome, since the
  // transfer may still land; the caller retries and gets the outcome once one is mined.
  if (outcome === 'in_flight' || outcome.status === 'pending') return { answer: 'in_progress' };
  deps.log.info(
    { key, account: account.id, status: outcome.status, cause: outcome.cause, transaction: outcome.transaction },
    'settle',
  );
  if (outcome.status === 'rejected') return { answer: 'limit' };
  return { answer: 'outcome', outcome };
}
