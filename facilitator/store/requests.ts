// The stored request: the signed /settle request, stored by key (first writer wins), what the
// sweeper reads to start workflows that were never started, and durable refusals.
import type pg from 'pg';
import { isBatchRequest, isUptoRequest, settlementTerms, type SettlementRequest } from '../settlement/request.ts';

/**
 * Stores the request by key; true when this call stored it (the first request of its
 * authorization), false when one was already there. First writer wins: any later request for
 * the key carries a signature over the same authorization (the handler checked it), so keeping
 * the first loses nothing.
 */
export async function saveSettleRequest(
  db: pg.Pool,
  key: string,
  accountId: string,
  request: SettlementRequest,
): Promise<boolean> {
  const { rowCount } = await db.query(
    'insert into settle_requests (settlement_key, account_id, request) values ($1, $2, $3) on conflict (settlement_key) do nothing',
    [key, accountId, JSON.stringify(request)],
  );
  return rowCount === 1;
}

export type StoredSettleRequest = {
  accountId: string;
  request: SettlementRequest;
  /** A durable refusal (guardrail, or a run that gave up before signing): answered, never claimed afresh. */
  refusedCause: string | null;
};

export async function loadSettleRequest(db: pg.Pool, key: string): Promise<StoredSettleRequest | null> {
  const { rows } = await db.query<{ account_id: string; request: SettlementRequest; refused_cause: string | null }>(
    'select account_id, request, refused_cause from settle_requests where settlement_key = $1',
    [key],
  );
  return rows[0]
    ? { accountId: rows[0].account_id, request: rows[0].request, refusedCause: rows[0].refused_cause }
    : null;
}

/** The settlement's workflow exists (its start was acknowledged, or found it already there). */
export async function markWorkflowStarted(db: pg.Pool, key: string): Promise<void> {
  await db.query(
    'update settle_requests set workflow_started_at = now() where settlement_key = $1 and workflow_started_at is null',
    [key],
  );
}

/**
 * Requests older than `olderThanMs` whose workflow start was never acknowledged and that opened
 * something a workflow must follow (a settlement row, or a durable refusal): what the sweeper
 * starts workflows for. A request that claimed nothing (refused before any claim, or answered
 * 503) owes nothing and is left alone.
 */
export async function unstartedSettlements(
  db: pg.Pool,
  olderThanMs: number,
  limit: number,
): Promise<Array<{ key: string; payer: string; summary: string }>> {
  const { rows } = await db.query<{ settlement_key: string; request: SettlementRequest }>(
    `select r.settlement_key, r.request from settle_requests r
     where r.workflow_started_at is null and r.created_at < now() - make_interval(secs => $1::double precision / 1000)
       and (r.refused_cause is not null or exists (select 1 from settlements s where s.settlement_key = r.settlement_key))
     order by r.created_at limit $2`,
    [olderThanMs, limit],
  );
  return rows.map((r) => ({ key: r.settlement_key, ...workflowLabels(r.request) }));
}

/** The search attribute and summary of a settlement's workflow, from its request (no signature). */
export function workflowLabels(request: SettlementRequest): { payer: string; summary: string } {
  const { payer, amount } = settlementTerms(request);
  const payTo = isUptoRequest(request) || isBatchRequest(request) ? request.payTo : request.paymentRequirements.payTo;
  return { payer, summary: `${amount} to ${payTo} from ${payer}` };
}

/** Makes a refusal durable on the request (the first cause stays). */
export async function markRefused(db: pg.Pool, key: string, cause: string): Promise<void> {
  await db.query('update settle_requests set refused_cause = coalesce(refused_cause, $2) where settlement_key = $1', [
    key,
    cause,
  ]);
}

/**
 * Whether `accountId` had a batch-settlement deposit into `channelId` settled here: the account
 * that may ask the channel's refund, which this facilitator signs as its receiver authorizer.
 */
export async function depositedBy(db: pg.Pool, accountId: string, channelId: string): Promise<boolean> {
  const { rows } = await db.query<{ deposited: boolean }>(
    `select exists (
       select 1 from settle_requests r join settlements s on s.settlement_key = r.settlement_key and s.status = 'settled'
       where lower(r.request->'action'->'voucher'->>'channelId') = lower($2) and r.account_id = $1
         and r.request->'action'->>'type' = 'deposit'
     ) as deposited`,
    [accountId, channelId],
  );
  return rows[0]?.deposited === true;
}
