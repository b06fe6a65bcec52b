// The reconciliation round: every reservation (ledger.ts) is trued up from its call's invocation
// row, the record of what the call did, by whichever process gets to it first (each one leased to
// one reconciler at a time, each settle done once). Why from the row: the row is written anyway,
// on every path and by whoever finishes the call (the API for a stream, the worker for a
// transactional call, the stale-stream sweep or the workflow for a call whose API died), so the
// true-up adds no step to the call's own path and survives any process's crash. What a
// completed row counts:
// - a call that never reached its upstream and whose payment went back (`attempts = 0`: refused
//   before forwarding, its payment released, never served): nothing, neither call nor amount;
// - one whose failure says nothing was sent (the SSRF guard at connect, an open circuit, a
//   credential that could not be resolved): no call, but what it was charged if its payment stayed;
// - a served call: one call, and what it was charged: a metered (`upto`) call's settled charge
//   (`payment_charge`; nothing when its charge failed) once its settlement is known, an `exact`
//   call's price (`payment_amount`), nothing for a free call.
// A running row, or a metered row whose charge is not settled yet, is looked at again shortly.
// A reservation with no row at all is given back once its owner (the admitting process) is
// gone, or once it is older than any admission can take (NO_ROW_AFTER_MS): a call that dies
// before it is recorded was never served.
import type { BudgetLedger, Usage } from './ledger.ts';

export type ReconcileSettings = {
  /** How often the round runs. */
  everyMs: number;
  /** A reservation without a row is given back after this even while its owner lives. */
  noRowAfterMs: number;
};

const BATCH = 1_000;
/** A round that handled this many may have left more due. */
export const BATCH_FULL = BATCH;
/** A reservation handed to a round is not handed to another for this long. */
const LEASE_MS = 10_000;
/** A running call is looked at again after this. */
const AGAIN_MS = 2_000;

type Row = {
  id: string;
  status: string;
  attempts: number;
  error_class: string | null;
  payment_amount: string | null;
  payment_scheme: string | null;
  payment_charge: string | null;
  payment_settlement: string | null;
};

const ROWS = `select id, status, attempts, error_class, payment_amount, payment_scheme, payment_charge, payment_settlement
  from invocations where id = any(string_to_array(?, ','))`;

const NOTHING: Usage = { amount: 0n, calls: 0 };

/** Error classes of a call that sent nothing to its upstream (gateway/upstream/errors.ts). */
const NOTHING_SENT: ReadonlySet<string> = new Set(['blocked', 'circuit_open', 'credential']);

/** What a row counts, or null while that is not known yet. */
export function countedOf(row: Row): Usage | null {
  if (row.status === 'pending' || row.status === 'running') return null;
  if (Number(row.attempts) === 0) return NOTHING;
  const calls = row.error_class !== null && NOTHING_SENT.has(row.error_class) ? 0 : 1;
  if (row.payment_scheme !== null) {
    if (row.payment_settlement === 'settled' || row.payment_settlement === 'unconfigured')
      return { amount: BigInt(row.payment_charge ?? '0'), calls };
    if (row.payment_settlement === 'failed') return { amount: 0n, calls };
    return null;
  }
  return { amount: BigInt(row.payment_amount ?? '0'), calls };
}

export type ReconcileDeps = {
  ledger: BudgetLedger;
  query: (sql: string, params: unknown[]) => Promise<Array<Record<string, unknown>>>;
  settings: ReconcileSettings;
  now?: () => number;
};

/** One round: the due reservations, trued up, given back or looked at again. Answers how many were due. */
export async function reconcileOnce(deps: ReconcileDeps): Promise<number> {
  const now = (deps.now ?? Date.now)();
  const due = await deps.ledger.due(now, now + LEASE_MS, BATCH);
  if (due.length === 0) return 0;
  // Invocation ids hold no comma: one text parameter, split by PostgreSQL.
  const rows = (await deps.query(ROWS, [due.map((d) => d.invocationId).join(',')])) as Row[];
  const byId = new Map(rows.map((r) => [r.id, r]));
  const rowless = due.filter((d) => !byId.has(d.invocationId));
  const alive = await deps.ledger.alive([...new Set(rowless.map((d) => d.owner))]);
  const settled: Array<{ invocationId: string; counted: Usage }> = [];
  const again: string[] = [];
  for (const d of due) {
    const row = byId.get(d.invocationId);
    if (!row) {
      const abandoned = !alive.has(d.owner) || now - d.reservedAtMs > deps.settings.noRowAfterMs;
      if (abandoned) settled.push({ invocationId: d.invocationId, counted: NOTHING });
      else again.push(d.invocationId);
      continue;
    }
    const counted = countedOf(row);
    if (counted) settled.push({ invocationId: d.invocationId, counted });
    else again.push(d.invocationId);
  }
  // One round trip each for the whole batch (each settle its own atomic step inside it).
  await Promise.all([deps.ledger.settleAll(settled), deps.ledger.deferAll(again, now + AGAIN_MS)]);
  return due.length;
}
