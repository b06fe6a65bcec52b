// What the tenant's agents were paid: charges by scheme and agent and the settlements with their
import type { ComponentChildren } from 'preact';
// transactions, summed from the invocations of the window (their payment fields); the channels
// and budgets of GET /v1/channels and GET /v1/budgets where the API serves them.
import { useMemo } from 'preact/hooks';
import { getJson, getPages, HttpError } from '../api.ts';
import { windowName, windowRange, WINDOWS, type WindowName } from '../analytics.ts';
import { AgentLink, Empty, Panel, WindowTabs } from '../components.tsx';
import { count, short, usdc, when } from '../format.ts';
import { usePoll, type Polled } from '../poll.ts';
import { setQuery, type Route } from '../route.ts';
import type { Invocation } from '../types.ts';

const MONEY_EVERY_MS = 30_000;
/** The most invocations one refresh reads (ten pages); beyond, the panels say they are partial. */
const MAX_ROWS = 1000;

const chargeOf = (inv: Invocation): bigint => BigInt(inv.payment_charge ?? inv.payment_amount ?? '0');
const schemeOf = (inv: Invocation): string => inv.payment_scheme ?? 'exact';

type Sum = { calls: number; units: bigint };

function sumBy(rows: Invocation[], key: (inv: Invocation) => string): [string, Sum][] {
  const by = new Map<string, Sum>();
  for (const inv of rows) {
    const sum = by.get(key(inv)) ?? { calls: 0, units: 0n };
    sum.calls += 1;
    sum.units += chargeOf(inv);
    by.set(key(inv), sum);
  }
  return [...by.entries()].sort((a, b) => (b[1].units > a[1].units ? 1 : b[1].units < a[1].units ? -1 : 0));
}

export function Money({ route }: { route: Route }) {
  const span = windowName(route.query.get('window'));
  const list = usePoll(
    (signal) => getPages<Invocation>('v1/invocations', { since: windowRange(span).since }, MAX_ROWS, signal),
    [span],
    MONEY_EVERY_MS,
  );
  // Charged: a payment was taken for the call and not refused at settlement (a failed upto charge collects nothing).
  const charged = useMemo(
    () => (list.data?.rows ?? []).filter((inv) => inv.payment_amount !== null && inv.payment_settlement !== 'failed'),
    [list.data],
  );
  const settlements = useMemo(
    () => (list.data?.rows ?? []).filter((inv) => inv.payment_transaction || inv.payment_settlement),
    [list.data],
  );
  const total = charged.reduce((a, inv) => a + chargeOf(inv), 0n);
  const partial = list.data?.truncated && <p class="note">The latest {MAX_ROWS} invocations of the window only.</p>;

  return (
    <>
      <div class="page-head">
        <h1>Money</h1>
        <WindowTabs value={span} onChange={(w: WindowName) => setQuery({ window: w })} />
      </div>
      <div class="columns">
        <Panel title="Charges by scheme" polled={list}>
          <p class="big" data-total="charged">
            {usdc(total)}{' '}
            <small>
              from {count(charged.length)} paid {charged.length === 1 ? 'call' : 'calls'},{' '}
              {WINDOWS[span].label.toLowerCase()}
            </small>
          </p>
          <SumTable rows={sumBy(charged, schemeOf)} head="Scheme" cell={(key) => key} />
          {partial}
        </Panel>
        <Panel title="Charges by agent">
          <SumTable rows={sumBy(charged, (inv) => inv.agent_id)} head="Agent" cell={(id) => <AgentLink id={id} />} />
          {partial}
        </Panel>
      </div>
      <Panel title="Settlements">
        {settlements.length === 0 ? (
          <Empty>No settlement in this window.</Empty>
        ) : (
          <div class="table-wrap">
            <table class="settlements">
              <thead>
                <tr>
                  <th scope="col">Created</th>
                  <th scope="col">Agent</th>
                  <th scope="col">Scheme</th>
                  <th scope="col" class="num">
                    Charge
                  </th>
                  <th scope="col">Settlement</th>
                  <th scope="col">Transaction</th>
                  <th scope="col">Payer</th>
                </tr>
              </thead>
              <tbody>
                {settlements.map((inv) => (
                  <tr data-invocation={inv.invocation_id}>
                    <td>{when(inv.created_at)}</td>
                    <td>
                      <AgentLink id={inv.agent_id} />
                    </td>
                    <td>{schemeOf(inv)}</td>
                    <td class="num">{usdc(chargeOf(inv))}</td>
                    <td>
                      {inv.payment_settlement ?? 'settled'}
                      {inv.payment_settle_error && <small> ({inv.payment_settle_error})</small>}
                    </td>
                    <td class="mono" title={inv.payment_transaction ?? undefined}>
                      {inv.payment_transaction ? short(inv.payment_transaction) : '—'}
                    </td>
                    <td class="mono" title={inv.payment_payer ?? undefined}>
                      {inv.payment_payer ? short(inv.payment_payer, 6) : '—'}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        )}
        {partial}
      </Panel>
      <div class="columns">
        <Channels />
        <Budgets />
      </div>
    </>
  );
}

function SumTable({ rows, head, cell }: { rows: [string, Sum][]; head: string; cell(key: string): ComponentChildren }) {
  if (rows.length === 0) return <Empty>No paid calls in this window.</Empty>;
  return (
    <div class="table-wrap">
      <table>
        <thead>
          <tr>
            <th scope="col">{head}</th>
            <th scope="col" class="num">
              Calls
            </th>
            <th scope="col" class="num">
              Charged
            </th>
          </tr>
        </thead>
        <tbody>
          {rows.map(([key, sum]) => (
            <tr data-key={key}>
              <td>{cell(key)}</td>
              <td class="num">{count(sum.calls)}</td>
              <td class="num">{usdc(sum.units)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

type Listed = Record<string, unknown>[] | null;

/** A list endpoint that may not be served yet: null when it answers 404, its rows otherwise. */
async function optionalList(path: string, signal: AbortSignal): Promise<Listed> {
  try {
    const body = await getJson<unknown>(path, {}, undefined, signal);
    const rows = Array.isArray(body) ? body : ((body as { data?: unknown }).data ?? []);
    return Array.isArray(rows) ? (rows as Record<string, unknown>[]) : [];
  } catch (err) {
    if (err instanceof HttpError && err.status === 404) return null;
    throw err;
  }
}

function NotAvailable({ what }: { what: string }) {
  return (
    <p class="not-available" data-not-available={what}>
      Not available: this gateway does not serve {what} yet (404).
    </p>
  );
}

const scalar = (v: unknown) => v === null || ['string', 'number', 'boolean'].includes(typeof v);
const isAmountKey = (key: string) => /amount|balance|deposit|limit|used|spent|charge|claimed|remaining/.test(key);
const show = (key: string, v: unknown) =>
  v === null || v === undefined ? '—' : isAmountKey(key) && /^\d+$/.test(String(v)) ? usdc(String(v)) : String(v);

function Channels() {
  const channels = usePoll((signal) => optionalList('v1/channels', signal), [], MONEY_EVERY_MS);
  return (
    <Panel title="Channels" polled={channels as Polled<unknown>}>
      <ListOrMissing
        polled={channels}
        what="GET /v1/channels"
        empty="No channels."
        render={(rows) => <GenericTable rows={rows} />}
      />
    </Panel>
  );
}

function ListOrMissing({
  polled,
  what,
  empty,
  render,
}: {
  polled: Polled<Listed>;
  what: string;
  empty: string;
  render(rows: Record<string, unknown>[]): ComponentChildren;
}) {
  if (polled.data === undefined) return null;
  if (polled.data === null) return <NotAvailable what={what} />;
  if (polled.data.length === 0) return <Empty>{empty}</Empty>;
  return <>{render(polled.data)}</>;
}

/** The rows as the API answers them, their scalar fields as columns (amounts in USDC). */
function GenericTable({ rows }: { rows: Record<string, unknown>[] }) {
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r).filter((k) => scalar(r[k]))))].slice(0, 9);
  return (
    <div class="table-wrap">
      <table class="generic">
        <thead>
          <tr>
            {keys.map((k) => (
              <th scope="col">{k.replace(/_/g, ' ')}</th>
            ))}
          </tr>
        </thead>
        <tbody>
          {rows.map((r) => (
            <tr>
              {keys.map((k) => (
                <td
                  class={typeof r[k] === 'string' && String(r[k]).startsWith('0x') ? 'mono' : undefined}
                  title={String(r[k] ?? '')}
                >
                  {typeof r[k] === 'string' && String(r[k]).length > 24 ? short(String(r[k])) : show(k, r[k])}
                </td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** A budget as GET /v1/budgets answers it (docs/API.md "Budgets"). */
type BudgetRow = {
  id: string;
  name: string;
  window: string;
  mode: string;
  limit: { amount: string | null; calls: number | null };
  used: { amount: string; calls: number };
};

type BudgetBar = { key: string; label: string; used: number; limit: number; usedText: string; limitText: string };

/** One bar per limited measure of a budget (its calls, its amount): used against limit in the current window. */
function budgetBars(b: BudgetRow): BudgetBar[] {
  const label = `${b.name} · ${b.window} · ${b.mode}`;
  const bars: BudgetBar[] = [];
  if (b.limit?.calls != null)
    bars.push({
      key: `${b.id}-calls`,
      label: `${label} · calls`,
      used: Number(b.used?.calls ?? 0),
      limit: b.limit.calls,
      usedText: `${b.used?.calls ?? 0} calls`,
      limitText: `${b.limit.calls} calls`,
    });
  if (b.limit?.amount != null)
    bars.push({
      key: `${b.id}-amount`,
      label: `${label} · amount`,
      used: Number(b.used?.amount ?? 0),
      limit: Number(b.limit.amount),
      usedText: usdc(b.used?.amount ?? '0'),
      limitText: usdc(b.limit.amount),
    });
  return bars;
}

function Budgets() {
  const budgets = usePoll((signal) => optionalList('v1/budgets', signal), [], MONEY_EVERY_MS);
  return (
    <Panel title="Budgets" polled={budgets as Polled<unknown>}>
      <ListOrMissing
        polled={budgets}
        what="GET /v1/budgets"
        empty="No budgets."
        render={(rows) => (
          <ul class="budgets">
            {(rows as BudgetRow[]).flatMap(budgetBars).map((f) => {
              const share = f.limit > 0 ? Math.min(1, f.used / f.limit) : 1;
              return (
                <li data-budget={f.key}>
                  <span class="budget-label">{f.label}</span>
                  <div
                    class={`bar${share >= 1 ? ' full' : share >= 0.8 ? ' high' : ''}`}
                    role="meter"
                    aria-valuemin={0}
                    aria-valuemax={f.limit}
                    aria-valuenow={f.used}
                    aria-label={f.label}
                  >
                    <div class="fill" style={{ width: `${(share * 100).toFixed(1)}%` }} />
                  </div>
                  <span class="budget-figures">
                    {f.usedText} of {f.limitText}
                  </span>
                </li>
              );
            })}
          </ul>
        )}
      />
    </Panel>
  );
}
