// The transactional invocation's statements on its row, as plain parameterised SQL: two round
// trips per call (load and lease the attempt, complete), without the ORM's query building and unit of
// work, which cost the worker most of its CPU per call (docs/BENCHMARKS.md, "Throughput").
//
// The guarantees are in the WHERE clauses, so they hold whoever races (a retried attempt, a
// zombie attempt whose heartbeat timed out, abandonInvocation):
// - attempt lease: counts the attempt only if no other attempt counted one since this one loaded the
//   row (`attempts = loaded`), and only on a row that is not terminal;
// - complete: writes the outcome only on a row that is not terminal, so a row is completed
//   exactly once; the analytics fold (gateway/analytics/fold.ts) folds it in after its commit.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { ErrorClass } from '../upstream/client.ts';
import type { Pricing, RecordedReading } from '../db/entities.ts';
import { releasingPayments } from '../payment/binding.ts';
import { KEEP_CALL_LEASE, TRANSACTIONAL_LEASE_SECONDS } from '../payment/channels/store.ts';
import { unmeasuredReading } from './metered.ts';
import { createStatementPool, numbered, type StatementPool } from '../db/statement-pool.ts';

/** An invocation's outcome, as the transactional activity records it and the workflow returns it. */
export type InvocationOutcome = {
  status: 'succeeded' | 'failed';
  upstreamStatus: number | null;
  latencyMs: number | null;
  errorClass: ErrorClass | null;
  /** A metered call: its charge is settled after this (gateway/payment/charges.ts). */
  chargeDue?: true;
};

/** The row, its agent's settings for the call, and (bodies in this database) the request body. */
type LoadedInvocation = {
  id: string;
  tenantId: string;
  status: 'pending' | 'running' | 'succeeded' | 'failed';
  attempts: number;
  requestId: string;
  /** Who called (the caller's user id, a public call's payer) and how (`token`, `x402`). */
  caller: string;
  callerKind: string;
  requestHeaders: Record<string, string>;
  requestBodyId: string | null;
  /** The request body when the load statement read it (loadBody), else null. */
  requestBody: Buffer | null;
  upstreamStatus: number | null;
  latencyMs: number | null;
  errorClass: ErrorClass | null;
  /** A metered call's maximum, recorded when it was admitted (metered.ts); null when not metered. */
  paymentMaxAmount: string | null;
  /** The load took the attempt's lease (see LOAD_AND_LEASE); the fields above are as they were before. */
  leased: boolean;
  /** Null when the agent is gone (deleted rows are soft: only a broken database has none). */
  agent: {
    upstreamUrl: string | null;
    credentialRef: string | null;
    captureBody: boolean;
    retryNonIdempotent: boolean;
    id: string;
    /** `a2a`: the answer's task is bound to the agent (gateway/a2a/tasks.ts). */
    protocol: string;
    pricing: Pricing | null;
  } | null;
};

/** What a completion records; absent fields are recorded as null. */
export type Completion = {
  status: 'succeeded' | 'failed';
  errorClass: ErrorClass | null;
  upstreamStatus?: number | null;
  latencyMs?: number | null;
  ttftMs?: number | null;
  responseBodyId?: string | null;
  responseContentType?: string | null;
  responseSha256?: string | null;
  /** protocol a2a: the task and context the answer named, recorded when the request named none. */
  a2aTaskId?: string | null;
  a2aContextId?: string | null;
  /** A metered call's charge and reading (metered.ts). */
  paymentCharge?: string | null;
  meterReading?: RecordedReading | null;
  /**
   * Completed before this attempt counted itself (the call could not be made, or was given
   * up): a row that counts no attempt then never reached its upstream, and its payment is
   * released in the same statement (the same payment header buys the call it paid for).
   */
  beforeAttempt?: boolean;
};

/** A body INSERT to run in the completion's statement (BodyStore.insertSql). */
export type BodyInsert = { sql: string; params: unknown[] };

export interface InvocationStore {
  /**
   * One statement: the row, its agent and, when asked, its request body; it also takes the attempt's
   * lease (as leaseAttempt does) when the call needs nothing resolved first. Undefined when there is no row.
   * `leaseSeconds`: how long a channel payment's lease is renewed for with the attempt (as leaseAttempt).
   */
  load(invocationId: string, opts: { withBody: boolean; leaseSeconds?: number }): Promise<LoadedInvocation | undefined>;
  /**
   * Marks the row running and counts the attempt, a channel payment's lease renewed for
   * `leaseSeconds` with it: `taken` when another attempt did so first or the row is terminal,
   * `channel_lost` when the call's channel lease is no longer its own (nothing counted).
   */
  leaseAttempt(
    invocationId: string,
    loadedAttempts: number,
    leaseSeconds?: number,
  ): Promise<'leased' | 'taken' | 'channel_lost'>;
  /**
   * Completes a non-terminal row and answers its outcome; a row already terminal keeps its
   * outcome, which is answered instead. Undefined when there is no row. `body` is stored in
   * the same statement (one round trip, one commit).
   */
  complete(invocationId: string, completion: Completion, body?: BodyInsert): Promise<InvocationOutcome | undefined>;
}

type Raw = Record<string, unknown>;
const numberOrNull = (v: unknown) => (v === null || v === undefined ? null : Number(v));

function outcomeOf(r: Raw): InvocationOutcome {
  return {
    status: r.status as InvocationOutcome['status'],
    upstreamStatus: numberOrNull(r.upstream_status),
    latencyMs: numberOrNull(r.latency_ms),
    errorClass: (r.error_class as ErrorClass | null) ?? null,
    // Only on a metered call's outcome: every other one is as it always was (recorded histories).
    ...(r.payment_scheme ? { chargeDue: true as const } : {}),
  };
}

const OUTCOME_COLUMNS = 'status, upstream_status, latency_ms, error_class, payment_scheme';

// The agent is matched in the row's tenant: a row never reaches another tenant's agent.
// The same statement takes the attempt's lease when nothing has to happen between the load
// and the lease: the agent needs no credential (resolving none is no I/O), the body is read here or
// there is none, the agent may be called (an upstream URL), and this is the first attempt or
// the agent opted in to re-sending.
const LOAD_AND_LEASE = (withBody: boolean) => `
  with loaded as (
    select i.id, i.tenant_id, i.status, i.attempts, i.request_id, i.caller, i.caller_kind, i.request_headers, i.request_body_id,
           i.upstream_status, i.latency_ms, i.error_class, i.payment_max_amount, i.payment_channel,
           a.id as agent_id, a.upstream_url, a.credential_ref, a.capture_body, a.retry_non_idempotent, a.protocol,
           case when i.payment_max_amount is not null then a.pricing end as pricing,
           ${withBody ? 'b.content' : 'null::bytea'} as request_body
      from invocations i
      left join agents a on a.id = i.agent_id and a.tenant_id = i.tenant_id
      ${withBody ? 'left join bodies b on b.id = i.request_body_id and b.tenant_id = i.tenant_id' : ''}
     where i.id = ?
  ), ${KEEP_CALL_LEASE}, leased as (
    update invocations i set status = 'running', attempts = i.attempts + 1, updated_at = ?
      from loaded l
     where i.id = l.id and i.attempts = l.attempts and i.status in ('pending', 'running')
       and l.agent_id is not null and l.upstream_url is not null and l.credential_ref is null
       and (l.attempts = 0 or l.retry_non_idempotent) ${withBody ? '' : 'and l.request_body_id is null'}
       and (l.payment_channel is null or exists (select 1 from kept))
    returning i.id
  )
  select l.*, exists (select 1 from leased) as leased from loaded l`;

// A channel payment's call is forwarded only while its channel's lease is still its own (KEEP_CALL_LEASE).
const LEASE_ATTEMPT = `
  with ${KEEP_CALL_LEASE}, leased as (
    update invocations set status = 'running', attempts = attempts + 1, updated_at = ?
     where id = ? and attempts = ? and status in ('pending', 'running')
       and (payment_channel is null or exists (select 1 from kept))
    returning id)
  select exists (select 1 from leased) as leased,
         exists (select 1 from invocations where id = ? and payment_channel is not null)
           and not exists (select 1 from kept) as channel_lost`;

// A row that is not terminal has none of the outcome's fields yet, so all are written.
// Completing a row also lets go of the caller's request (body and headers) unless the agent
// captures bodies: once the call is over nothing needs them, and a kept body is a copy of a
// caller's data. The body row goes in the same statement (a completed row never points at a
// deleted body, and a terminal row is never touched again); its digest stays for the receipt.
const RELEASE_REQUEST = `
  ending as (
    select i.request_body_id, coalesce(a.capture_body, false) as keep
      from invocations i left join agents a on a.id = i.agent_id and a.tenant_id = i.tenant_id
     where i.id = ? and i.status in ('pending', 'running')
  ),
  released_body as (
    delete from bodies where id = (select request_body_id from ending where not keep)
  )`;
const UNMEASURED = JSON.stringify(unmeasuredReading('not_measured'));
const COMPLETE = (returning: string) => `
  update invocations
     set status = ?, error_class = ?, upstream_status = ?, latency_ms = ?, ttft_ms = ?,
         response_body_id = ?, response_content_type = ?, response_sha256 = ?, updated_at = ?, completed_at = ?,
         a2a_task_id = coalesce(a2a_task_id, ?), a2a_context_id = coalesce(a2a_context_id, ?),
         -- A metered row always gets a charge: one completed without its meter read (never
         -- performed, closed unfinished) is charged 0, its reading none (metered.ts).
         payment_charge = case when payment_scheme is not null then coalesce(?, '0') end,
         -- What a metered call's payment comes to is its charge (the maximum stays beside it).
         payment_amount = case when payment_scheme is not null then coalesce(?, '0') else payment_amount end,
         meter_reading = case when payment_scheme is not null then coalesce(?::jsonb, '${UNMEASURED}'::jsonb) end,
         request_body_id = case when (select keep from ending) then request_body_id end,
         -- The receipt's request digest outlives the body (the statement reads the body before its delete).
         request_sha256 = coalesce(request_sha256, (select b.sha256 from bodies b where b.id = invocations.request_body_id)),
         request_headers = case when (select keep from ending) then request_headers else '{}'::jsonb end
   where id = ? and status in ('pending', 'running')
  returning ${returning}`;

const COMPLETE_BEFORE_ATTEMPT = releasingPayments(COMPLETE(`id, attempts, ${OUTCOME_COLUMNS}`), RELEASE_REQUEST);

// A call whose workflow ended without completing its row (terminated, or gone from Temporal):
// closed as a completion would close it (failed, request let go unless captured), and its
// payment released when the row counts no attempt: nothing ever reached the upstream.
const CLOSE_UNFINISHED = releasingPayments(COMPLETE('id, attempts'), RELEASE_REQUEST);

/**
 * Fails an unfinished call whose workflow closed without completing it, with `errorClass`
 * saying why; null when the row was terminal (or absent) already, else whether its payment
 * was released (the call never reached its upstream).
 */
export async function closeUnfinished(
  orm: MikroORM,
  invocationId: string,
  errorClass: string,
): Promise<{ released: boolean } | null> {
  const now = new Date();
  const [r] = await orm.em
    .getConnection()
    .execute<Array<{ released: boolean }>>(CLOSE_UNFINISHED, [
      invocationId,
      'failed',
      errorClass,
      null,
      null,
      null,
      null,
      null,
      null,
      now,
      now,
      null,
      null,
      null,
      null,
      null,
      invocationId,
    ]);
  return r ? { released: r.released } : null;
}

// The statements every call makes, prepared once per connection of a statement pool
// (db/statement-pool.ts): PostgreSQL plans them once, and the worker sends typed parameters
// instead of formatting every value into the text (MikroORM's way) on each call.
const PREPARED = {
  loadAndLease: numbered(LOAD_AND_LEASE(false)),
  loadAndLeaseWithBody: numbered(LOAD_AND_LEASE(true)),
  leaseAttempt: numbered(LEASE_ATTEMPT),
  complete: numbered(`with ${RELEASE_REQUEST} ${COMPLETE(OUTCOME_COLUMNS)}`),
  completeBeforeAttempt: numbered(COMPLETE_BEFORE_ATTEMPT),
};

export function createInvocationStore(
  orm: MikroORM,
  statements: StatementPool = createStatementPool(orm, 'gateway-worker'),
): InvocationStore {
  // Raw statements on the ORM's pool (no entity manager, identity map or change set) for the
  // rare ones; the statement pool for those of every call.
  const execute = (sql: string, params: unknown[]) => orm.em.getConnection().execute(sql, params);
  const prepared = (name: keyof typeof PREPARED, params: unknown[]) =>
    statements.rows(`invocation-${name}`, PREPARED[name], params);

  return {
    async load(invocationId, { withBody, leaseSeconds = TRANSACTIONAL_LEASE_SECONDS }) {
      const [r] = await prepared(withBody ? 'loadAndLeaseWithBody' : 'loadAndLease', [
        invocationId,
        leaseSeconds,
        invocationId,
        new Date(),
      ]);
      if (!r) return undefined;
      return {
        id: r.id as string,
        tenantId: r.tenant_id as string,
        status: r.status as LoadedInvocation['status'],
        attempts: Number(r.attempts),
        requestId: r.request_id as string,
        caller: String(r.caller ?? ''),
        callerKind: String(r.caller_kind ?? ''),
        requestHeaders: (r.request_headers as Record<string, string>) ?? {},
        requestBodyId: (r.request_body_id as string | null) ?? null,
        requestBody: r.request_body ? Buffer.from(r.request_body as Uint8Array) : null,
        upstreamStatus: numberOrNull(r.upstream_status),
        latencyMs: numberOrNull(r.latency_ms),
        errorClass: (r.error_class as ErrorClass | null) ?? null,
        paymentMaxAmount: (r.payment_max_amount as string | null) ?? null,
        leased: r.leased === true,
        agent: r.agent_id
          ? {
              upstreamUrl: (r.upstream_url as string | null) ?? null,
              credentialRef: (r.credential_ref as string | null) ?? null,
              captureBody: Boolean(r.capture_body),
              retryNonIdempotent: Boolean(r.retry_non_idempotent),
              id: r.agent_id as string,
              protocol: String(r.protocol),
              pricing: (r.pricing as Pricing | null) ?? null,
            }
          : null,
      };
    },

    async leaseAttempt(invocationId, loadedAttempts, leaseSeconds = TRANSACTIONAL_LEASE_SECONDS) {
      const [r] = await prepared('leaseAttempt', [
        leaseSeconds,
        invocationId,
        new Date(),
        invocationId,
        loadedAttempts,
        invocationId,
      ]);
      return r?.leased === true ? 'leased' : r?.channel_lost === true ? 'channel_lost' : 'taken';
    },

    async complete(invocationId, c, body) {
      const now = new Date();
      const params = [
        c.status,
        c.errorClass,
        c.upstreamStatus ?? null,
        c.latencyMs ?? null,
        c.ttftMs ?? null,
        c.responseBodyId ?? null,
        c.responseContentType ?? null,
        c.responseSha256 ?? null,
        now,
        now,
        c.a2aTaskId ?? null,
        c.a2aContextId ?? null,
        c.paymentCharge ?? null,
        c.paymentCharge ?? null,
        c.meterReading ? JSON.stringify(c.meterReading) : null,
        invocationId,
      ];
      // The body and the completion commit together: a completed row never points at a body
      // that was not stored (an unused body, the row already terminal, is a harmless orphan).
      const [r] = body
        ? ((await execute(`with stored_body as (${body.sql}), ${RELEASE_REQUEST} ${COMPLETE(OUTCOME_COLUMNS)}`, [
            ...body.params,
            invocationId,
            ...params,
          ])) as Raw[])
        : await prepared(c.beforeAttempt ? 'completeBeforeAttempt' : 'complete', [invocationId, ...params]);
      if (r) return outcomeOf(r);
      // Nothing completed: the row was terminal already (it keeps its outcome) or is absent.
      const [existing] = (await execute(`select ${OUTCOME_COLUMNS} from invocations where id = ?`, [
        invocationId,
      ])) as Raw[];
      return existing ? outcomeOf(existing) : undefined;
    },
  };
}
