// The budget alert's activity, thin over the domain's delivery (gateway/budgets/alerts.ts): the
// body is built, signed and sent here, from the budget's row and the tenant's secret, so neither
// the body nor the secret enters the workflow's history. A receiver that does not take it is a
// retryable failure whose type the history shows.
import { ApplicationFailure, ApplicationFailureCategory } from '@temporalio/common';
import type { Dispatcher } from 'undici';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Keyring } from '../gateway/credentials/config.ts';
import { AlertNotDelivered, deliverAlert, type AlertFacts, type Delivery } from '../gateway/budgets/alerts.ts';

export type { AlertFacts, Delivery };

export interface BudgetAlertActivities {
  /** POSTs the signed alert to the budget's webhook_url once; throws while the receiver does not take it. */
  deliverBudgetAlert(alert: AlertFacts): Promise<Delivery>;
}

export function createBudgetAlertActivities(deps: {
  orm: MikroORM;
  keyring: Keyring;
  dispatcher: Dispatcher;
  timeoutMs: number;
}): BudgetAlertActivities {
  return {
    async deliverBudgetAlert(alert) {
      try {
        return await deliverAlert({ db: deps.orm, ...deps }, alert);
      } catch (err) {
        if (err instanceof AlertNotDelivered)
          throw ApplicationFailure.create({
            message: err.message,
            type: 'AlertNotDelivered',
            category: ApplicationFailureCategory.BENIGN,
          });
        throw err;
      }
    },
  };
}
