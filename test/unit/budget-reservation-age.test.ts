// A /v1 HTTP call reserves its budgets at the door, before its body arrives: the reconciler
// must not give back a live caller's reservation while its body may still be arriving and its
// payment settling, or a slow upload would be served uncounted past a hard budget.
import assert from 'node:assert/strict';
import { loadGatewayConfig } from '../../gateway/config.ts';

const ENV = { AUTH_JWT_SECRET: 'x'.repeat(40), DATABASE_URL: 'postgres://localhost/none' };

describe('budgets: how long a reservation without a row is kept for a live caller', () => {
  it('by default outlasts the slowest body the API reads plus the settlement timeout', () => {
    const config = loadGatewayConfig({ ...ENV, BODY_READ_TIMEOUT_MS: '300000', SETTLEMENT_TIMEOUT_MS: '30000' });
    assert.ok(config.budgets.noRowAfterMs > 300_000 + 30_000, String(config.budgets.noRowAfterMs));
  });
  it('follows a longer body read timeout', () => {
    const config = loadGatewayConfig({ ...ENV, BODY_READ_TIMEOUT_MS: '900000' });
    assert.ok(config.budgets.noRowAfterMs > 900_000, String(config.budgets.noRowAfterMs));
  });
  it('keeps an operator-set value', () => {
    const config = loadGatewayConfig({ ...ENV, BUDGET_NO_ROW_AFTER_MS: '1234567' });
    assert.equal(config.budgets.noRowAfterMs, 1_234_567);
  });
});
