// A budget as the API shows it: its settings and its current window's use (read from the
// ledger, gateway/budgets/ledger.ts), what remains of it, and when the window resets.
import type { z } from 'zod';
import type { Budget } from '../../gateway/budgets/entity.ts';
import type { BudgetLedger, Usage } from '../../gateway/budgets/ledger.ts';
import { windowAt } from '../../gateway/budgets/windows.ts';
import type { BudgetView } from './schema.ts';

type View = z.infer<typeof BudgetView>;

const clampAt0 = (n: bigint) => (n < 0n ? 0n : n);

function viewOf(row: Budget, used: Usage, start: Date, resetsAt: Date | null): View {
  const limitCalls = row.limitCalls == null ? null : Number(row.limitCalls);
  const limitAmount = row.limitAmount ?? null;
  return {
    id: row.id,
    tenant_id: row.tenantId,
    name: row.name,
    scope: row.scope,
    limit: { amount: limitAmount, calls: limitCalls },
    window: row.timeWindow,
    mode: row.mode,
    alerts: row.webhookUrl ? { thresholds: row.alertThresholds ?? [], webhook_url: row.webhookUrl } : null,
    used: { amount: used.amount.toString(), calls: used.calls },
    remaining: {
      amount: limitAmount === null ? null : clampAt0(BigInt(limitAmount) - used.amount).toString(),
      calls: limitCalls === null ? null : Math.max(0, limitCalls - used.calls),
    },
    window_start: start.toISOString(),
    resets_at: resetsAt?.toISOString() ?? null,
    created_at: row.createdAt.toISOString(),
    updated_at: row.updatedAt.toISOString(),
  };
}

/** The views of these budgets, their windows' use read in one round trip. */
export async function serializeBudgets(ledger: BudgetLedger, rows: Budget[], now = new Date()): Promise<View[]> {
  const spans = rows.map((row) => windowAt(row.timeWindow, now, row.createdAt));
  const used = await ledger.usage(
    rows.map((row, i) => ({ budgetId: row.id, windowStartMs: spans[i].start.getTime() })),
  );
  return rows.map((row, i) => viewOf(row, used[i], spans[i].start, spans[i].resetsAt));
}
