// A table of invocations (the list rows of GET /v1/invocations: no body is ever listed) whose
// rows open their details: payment, receipt, and the workflow in the Temporal Web UI.
import { Fragment } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { getJson, HttpError } from './api.ts';
import { AgentLink } from './components.tsx';
import { workflowUrl } from './config.ts';
import { ms, short, usdc, when } from './format.ts';
import type { Invocation, Receipt } from './types.ts';

export function InvocationTable({ rows, showAgent = true }: { rows: Invocation[]; showAgent?: boolean }) {
  const [open, setOpen] = useState<string | null>(null);
  return (
    <div class="table-wrap">
      <table class="invocations">
        <thead>
          <tr>
            <th scope="col">Created</th>
            {showAgent && <th scope="col">Agent</th>}
            <th scope="col">Status</th>
            <th scope="col">Mode</th>
            <th scope="col" class="num">
              Latency
            </th>
            <th scope="col">Caller</th>
            <th scope="col">Payment</th>
            <th scope="col">
              <span class="visually-hidden">Details</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {rows.map((inv) => (
            <Fragment key={inv.invocation_id}>
              <tr data-invocation={inv.invocation_id} data-status={inv.status}>
                <td>{when(inv.created_at)}</td>
                {showAgent && (
                  <td>
                    <AgentLink id={inv.agent_id} />
                  </td>
                )}
                <td>
                  <span class={`badge ${inv.status}`}>{inv.status}</span>
                  {inv.error_class && <small class="error-class"> {inv.error_class}</small>}
                </td>
                <td>{inv.mode}</td>
                <td class="num">{ms(inv.latency_ms)}</td>
                <td class="mono" title={inv.payment_payer ?? undefined}>
                  {inv.caller_kind === 'x402' ? `payer ${short(inv.payment_payer ?? '', 6)}` : 'token'}
                </td>
                <td>
                  {inv.payment_amount
                    ? `${usdc(inv.payment_charge ?? inv.payment_amount)} ${inv.payment_scheme ?? 'exact'}`
                    : '—'}
                </td>
                <td>
                  <button
                    type="button"
                    class="link"
                    aria-expanded={open === inv.invocation_id}
                    aria-controls={`detail-${inv.invocation_id}`}
                    onClick={() => setOpen(open === inv.invocation_id ? null : inv.invocation_id)}
                  >
                    {open === inv.invocation_id ? 'Close' : 'Details'}
                  </button>
                </td>
              </tr>
              {open === inv.invocation_id && (
                <tr class="detail-row">
                  <td colSpan={showAgent ? 8 : 7} id={`detail-${inv.invocation_id}`}>
                    <InvocationDetail inv={inv} />
                  </td>
                </tr>
              )}
            </Fragment>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function InvocationDetail({ inv }: { inv: Invocation }) {
  return (
    <div class="detail" data-detail={inv.invocation_id}>
      <dl class="facts">
        <dt>Invocation</dt>
        <dd class="mono">{inv.invocation_id}</dd>
        <dt>Completed</dt>
        <dd>{when(inv.completed_at)}</dd>
        <dt>Upstream status</dt>
        <dd>{inv.upstream_status ?? '—'}</dd>
        {inv.error_class && (
          <>
            <dt>Error class</dt>
            <dd>{inv.error_class}</dd>
          </>
        )}
        <dt>Workflow</dt>
        <dd>
          {inv.mode === 'transactional' ? (
            <a class="workflow-link" href={workflowUrl(inv.invocation_id)} target="_blank" rel="noopener noreferrer">
              Open in the Temporal Web UI
            </a>
          ) : (
            'none (a streaming call runs in the API process)'
          )}
        </dd>
      </dl>
      {inv.payment_amount && <Payment inv={inv} />}
      <ReceiptView id={inv.invocation_id} />
    </div>
  );
}

function Payment({ inv }: { inv: Invocation }) {
  return (
    <dl class="facts payment" aria-label="Payment">
      <dt>Scheme</dt>
      <dd data-field="scheme">{inv.payment_scheme ?? 'exact'}</dd>
      <dt>Charge</dt>
      <dd data-field="charge">{usdc(inv.payment_charge ?? inv.payment_amount)}</dd>
      {inv.payment_max_amount && (
        <>
          <dt>Maximum</dt>
          <dd>{usdc(inv.payment_max_amount)}</dd>
        </>
      )}
      <dt>Payer</dt>
      <dd class="mono">{inv.payment_payer ?? '—'}</dd>
      <dt>Network</dt>
      <dd>{inv.payment_network ?? '—'}</dd>
      <dt>Settlement</dt>
      <dd>{inv.payment_settlement ?? (inv.payment_transaction ? 'settled' : '—')}</dd>
      {inv.payment_settle_error && (
        <>
          <dt>Settle error</dt>
          <dd>{inv.payment_settle_error}</dd>
        </>
      )}
      {inv.payment_channel && (
        <>
          <dt>Channel</dt>
          <dd class="mono">{inv.payment_channel}</dd>
        </>
      )}
      <dt>Transaction</dt>
      <dd class="mono" data-field="transaction">
        {inv.payment_transaction ?? '—'}
      </dd>
    </dl>
  );
}

function ReceiptView({ id }: { id: string }) {
  const [state, setState] = useState<{ receipt?: Receipt; error?: string }>({});
  useEffect(() => {
    let live = true;
    getJson<Receipt>(`v1/invocations/${encodeURIComponent(id)}/receipt`)
      .then((receipt) => live && setState({ receipt }))
      .catch(
        (err: Error) =>
          live &&
          setState({
            error:
              err instanceof HttpError && err.status === 404
                ? 'None: the agent emits no receipts, or it is not signed yet.'
                : err.message,
          }),
      );
    return () => {
      live = false;
    };
  }, [id]);
  return (
    <div class="receipt" aria-label="Receipt">
      <h3>Receipt</h3>
      {state.receipt ? (
        <>
          <p>
            Signed {when(state.receipt.created_at)} with key <code>{state.receipt.kid}</code> ({state.receipt.alg});
            verify it against <code>/.well-known/jwks.json</code>.
          </p>
          <textarea readOnly rows={3} aria-label="Receipt (JWS)" value={state.receipt.receipt} />
        </>
      ) : (
        <p>{state.error ?? 'Loading…'}</p>
      )}
    </div>
  );
}
