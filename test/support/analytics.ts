// Analytics are folded from the invocation rows in rounds (gateway/analytics/fold.ts): a test
// that reads them after its calls first waits for a round that started after its rows were
// committed, which folds them. No fixed sleep: the round waits for any round in progress.
import { foldRound } from '../../gateway/analytics/fold.ts';
import { stack } from './stack.ts';

/** Resolves once every invocation change committed before the call is in the rollups. */
export async function analyticsCaughtUp(): Promise<void> {
  await foldRound(stack().orm, true);
}
