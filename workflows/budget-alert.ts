// One budget alert (gateway/budgets/alerts.ts): a threshold crossed in one window of one budget,
// delivered to the budget's webhook_url. Started once per threshold and window (its workflow id
// says which, temporal/budget-rounds.ts), it retries a receiver that does not take it with
// backoff for a day, then gives up; the history holds ids and numbers only.
import { proxyActivities } from '@temporalio/workflow';
import type { AlertFacts, BudgetAlertActivities, Delivery } from '../activities/budget-alerts.ts';

const { deliverBudgetAlert } = proxyActivities<BudgetAlertActivities>({
  startToCloseTimeout: '30 seconds',
  scheduleToCloseTimeout: '24 hours',
  retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 minutes' },
});

export type BudgetAlertInput = AlertFacts;

export async function BudgetAlertWorkflow(input: BudgetAlertInput): Promise<Delivery> {
  return deliverBudgetAlert(input);
}
