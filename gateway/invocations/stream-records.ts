// Writes streaming invocation rows off the call's latency path (docs/PROXY.md, "Pipeline",
// row writes) through two group-commit queues on connections of the process's own
// (row-session.ts): N rows cost one statement and one commit, which matters most for
// completions, since the analytics trigger folds each into its agent's hourly rollup row and
// separate completions of one agent would queue on that row's lock. Starts go on the row
// session, which holds the owner lock every row names; completions on a second connection,
// so a start never queues behind a completion's trigger. Every item is a whole row, upserted:
// a completion never depends on its start having been written (a call that ends while its
// start is queued is written once, whole), a start after its completion changes nothing, and
// only a `running` row, or one the stale-stream sweep failed as `gateway_lost`, is completed.
// A receipt commits in its completion's statement. A failed batch is written again row by row,
// retrying what may pass, so one bad row cannot lose the others.
import { setTimeout as sleep } from 'node:timers/promises';
import type { MikroORM } from '@mikro-orm/postgresql';
import { closeWithOrm } from '../db/orm.ts';
import { createRowSession, type RowSession, type Statement } from './row-session.ts';
import type { Invocation, RecordedReading } from '../db/entities.ts';
import { ADMITTED_CALL_FIELDS, invocationColumns, type InvocationFields } from './columns.ts';

export type StartedRow = Pick<
  Invocation,
  | 'id'
  | 'tenantId'
  | 'agentId'
  | 'status'
  | 'requestId'
  | 'caller'
  | 'callerKind'
  | 'model'
  | 'contentType'
  | 'requestBytes'
  | 'mcpMethod'
  | 'mcpTool'
  | 'paymentNetwork'
  | 'paymentAsset'
  | 'paymentAmount'
  | 'paymentPayer'
  | 'paymentNonce'
  | 'paymentTransaction'
  | 'createdAt'
> &
  Partial<
    Pick<Invocation, 'a2aMethod' | 'a2aSkill' | 'paymentScheme' | 'paymentMaxAmount' | 'paymentChannel' | 'mcpServerId'>
  > &
  Partial<Omit<Completion, 'id' | 'status'>> & { completedAt?: Date | null };

export type Completion = {
  id: string;
  status: 'succeeded' | 'failed';
  upstreamStatus: number | null;
  errorClass: string | null;
  latencyMs: number | null;
  ttftMs: number | null;
  responseContentType: string | null;
  /** protocol a2a: the task and context the call was about (its request's, else its answer's first). */
  a2aTaskId?: string | null;
  a2aContextId?: string | null;
  /** A metered call's charge and reading (metered.ts). */
  paymentCharge?: string | null;
  meterReading?: RecordedReading | null;
};

/** A signed receipt for the completed row, stored with its completion. */
type RowReceipt = { kid: string; jws: string };

export type CompletedRow = StartedRow &
  Completion & {
    completedAt: Date;
    requestSha256?: string | null;
    responseSha256?: string | null;
    receipt?: RowReceipt | null;
  };

export interface InvocationRecorder {
  /**
   * Resolves once the `running` row is committed. It is sent within START_DELAY_MS (or, when a
   * statement is in flight then, once it returns, if later); once sent, it commits even if this process dies
   * (row-session.ts).
   */
  start(row: StartedRow): Promise<void>;
  /**
   * A paid call's row, inserted with its payment binding (no owner, no attempt counted), takes
   * this process's owner and counts its attempt; the call is forwarded only once this has
   * committed, so a row without them never reached the upstream (stale-streams.ts). False when
   * the row is no longer running (the lost-stream sweep closed it): nothing may be forwarded.
   */
  markForwarding(id: string): Promise<boolean>;
  /**
   * Writes `row` whole, owned by this process and counted as forwarded, in a statement of the
   * caller's that inserts it (`rowInsert`, reading the row from `$1`) with what must commit with
   * it (a paid call's payment binding, gateway/payment/binding.ts), on the row session, sent now;
   * answers the rows the statement returned (none: it wrote nothing).
   */
  insertWith(
    row: StartedRow,
    build: (rowInsert: string) => Omit<Statement, 'params'> & { params: unknown[] },
  ): Promise<number>;
  /**
   * Writes the whole terminal row (completing the started one); resolves once committed. `now`:
   * sent without waiting COMPLETION_DELAY_MS for company (a channel payment's call, whose channel
   * the payer's next call waits for until this commits and its charge with it).
   */
  complete(row: CompletedRow, now?: boolean): Promise<void>;
  /** Writes what is queued (for at most 2 s), then stops writing (what is left is failed) and closes the row session. */
  close(): Promise<void>;
}

type QueuedRow = Omit<StartedRow, 'status' | 'completedAt'> &
  Partial<Omit<CompletedRow, 'status' | 'completedAt'>> & { status: string; completedAt?: Date | null };

const MAX_BATCH = 256;
/**
 * How long a start may wait for others to share its statement. Short, since a process that
 * dies before its start is sent leaves no row for the call (docs/PROXY.md); long enough that
 * the starts of calls arriving together share one write, and that a call that ends within it
 * (most, at 1 KiB) is written once, completed, instead of twice.
 */
const START_DELAY_MS = 2;
/** How long a completion may wait for others to share its statement. */
const COMPLETION_DELAY_MS = 10;
/**
 * Waits before a failed row is queued again. Not a cockatiel retry policy: a retried row goes
 * back into the group-commit queue and joins the next batch, where a policy around its write
 * would hold the queue (and every row behind it) through its backoff.
 */
const RETRY_DELAYS_MS = [200, 1_000, 3_000, 10_000];
/** How long close() may take to write what is queued. */
const CLOSE_FLUSH_MS = 2_000;

// What a call's outcome sets, on the whole row and on a started one.
const OUTCOME_FIELDS = [
  'errorClass',
  'upstreamStatus',
  'latencyMs',
  'ttftMs',
  'responseContentType',
  'requestSha256',
  'responseSha256',
  'a2aTaskId',
  'a2aContextId',
  'paymentCharge',
  'meterReading',
] as const;

// The row's fields, in column order (names from the shared mapping, columns.ts).
const ROW_FIELDS = [...ADMITTED_CALL_FIELDS, ...OUTCOME_FIELDS, 'completedAt', 'owner'] as const;
const ROW = invocationColumns(ROW_FIELDS);
const COLUMNS = ROW.names;
// The time columns, set by recordOf as text.
const [CREATED_AT, UPDATED_AT, COMPLETED_AT] = (['createdAt', 'updatedAt', 'completedAt'] as const).map(
  (f) => COLUMNS[ROW_FIELDS.indexOf(f)],
);

const METER_READING = COLUMNS[ROW_FIELDS.indexOf('meterReading')];

// What a completion sets on a started row; also the payment's amount, since a metered call's
// comes to its charge (the completion carries it; any other completion carries the amount its
// row was admitted with).
const COMPLETED = invocationColumns([
  'status',
  ...OUTCOME_FIELDS,
  'paymentAmount',
  'updatedAt',
  'completedAt',
] as const).names;

/**
 * What a completion sets, as an update reads it from `r` (the row's record, completionRecord):
 * for a statement that completes a row and writes what follows from it at once.
 */
export const COMPLETION_SET = COMPLETED.map((c) => `${c} = r.${c}`).join(', ');

/** A completed row's record as COMPLETION_SET reads it (JSON, read with json_populate_record). */
export function completionRecord(row: CompletedRow): string {
  return JSON.stringify(recordOf(row as QueuedRow, ''));
}

/** A row as the statement reads it: an object keyed by column name (JSON, see statementFor). */
function recordOf(r: QueuedRow, owner: string): Record<string, unknown> {
  // Dates as their ISO text, each converted once: JSON.stringify leaves its fast path for an
  // object holding a Date (toJSON), which cost more than the rest of the row's serialization.
  const createdAt = r.createdAt.toISOString();
  const completedAt = r.completedAt ? r.completedAt.toISOString() : null;
  const values = ROW.values({
    ...r,
    status: r.status as InvocationFields['status'],
    mode: 'streaming',
    attempts: 1,
    owner,
  });
  // Most columns of a streaming row are null (payment, MCP, digests…): left out, since
  // json_populate_recordset reads a missing key as null, and the JSON stays short.
  const record: Record<string, unknown> = {};
  for (let i = 0; i < COLUMNS.length; i++) if (values[i] !== null) record[COLUMNS[i]] = values[i];
  // A JSON column travels as JSON in the array, not as its text (which would be a JSON string).
  if (r.meterReading) record[METER_READING] = r.meterReading;
  record[CREATED_AT] = createdAt;
  record[UPDATED_AT] = completedAt ?? createdAt;
  if (completedAt) record[COMPLETED_AT] = completedAt;
  return record;
}

// The rows travel as one JSON array read by json_populate_recordset, typed by the table's own
// row type, so the statement's text is the same whatever the batch size: each connection
// prepares it once (a named statement) and PostgreSQL does not parse, analyse and plan it per
// batch again (docs/PROXY.md, "Pipeline").
const ROWS = `select ${COLUMNS.join(', ')} from json_populate_recordset(null::invocations, $1::json)`;
// One row, inserted as it is (a paid call's, with what its caller's statement commits with it).
const ROW_INSERT = `insert into invocations (${COLUMNS.join(', ')}) ${ROWS}`;
// A start meeting a row that is there already (a paid call's row, inserted with its payment
// binding) only gives it its owner.
const UPSERT = `insert into invocations (${COLUMNS.join(', ')}) ${ROWS}
    on conflict (id) do update set owner = case when excluded.status = 'running' then excluded.owner else invocations.owner end, ${COMPLETED.map((c) => `${c} = case when excluded.status = 'running' then invocations.${c} else excluded.${c} end`).join(', ')}
    where (invocations.status = 'running' and (excluded.status <> 'running' or invocations.owner is distinct from excluded.owner))
       -- The sweep's verdict is a guess (the owner's lock was free: its process, or only its row
       -- connection, was lost); the process's own completion, if it comes, is the truth.
       -- Unless its charge was settled meanwhile: the row then stays as it was charged.
       or (invocations.error_class = 'gateway_lost' and excluded.status <> 'running'
           and invocations.payment_settlement is null)`;
// Receipts only for the rows this statement wrote: a receipt always matches its row.
const UPSERT_WITH_RECEIPTS = `with written as (${UPSERT} returning id)
    insert into receipts (invocation_id, tenant_id, agent_id, kid, jws)
    select v.invocation_id, v.tenant_id, v.agent_id, v.kid, v.jws
      from json_populate_recordset(null::receipts, $2::json) as v
     where v.invocation_id in (select id from written)
    on conflict (invocation_id) do nothing`;

// On the row session, so the owner it names is held (row-session.ts). Not group-committed: the
// paid call waits for it, and there is one per call. A start sent meanwhile waits behind it for
// one round trip, as behind a start statement in flight.
const MARK_FORWARDING = `update invocations set owner = $1, attempts = 1, updated_at = now()
   where id = $2 and status = 'running' and mode = 'streaming' and attempts = 0 returning id`;

/** One statement for the rows (distinct ids), with their receipts. */
function statementFor(rows: QueuedRow[], owner: string): Statement {
  const params = [JSON.stringify(rows.map((r) => recordOf(r, owner)))];
  const receipts = rows.filter((r) => r.receipt);
  if (receipts.length === 0) return { name: 'gw_stream_rows', sql: UPSERT, params };
  const receiptRecords = receipts.map((r) => ({
    invocation_id: r.id,
    tenant_id: r.tenantId,
    agent_id: r.agentId,
    kid: r.receipt!.kid,
    jws: r.receipt!.jws,
  }));
  return {
    name: 'gw_stream_rows_receipts',
    sql: UPSERT_WITH_RECEIPTS,
    params: [...params, JSON.stringify(receiptRecords)],
  };
}

/**
 * Errors the database will give again for the same row: data exceptions, integrity
 * violations, and a protocol violation (a parameter the wire format refuses, such as U+0000).
 */
function refusedAsSuch(err: unknown): boolean {
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' && (code.startsWith('22') || code.startsWith('23') || code === '08P01');
}

type Item = {
  row: QueuedRow;
  attempt: number;
  /** performance.now() by which its statement is sent (queued at + the queue's delay). */
  due: number;
  resolve: () => void;
  reject: (err: unknown) => void;
};

type Runner = (rows: QueuedRow[]) => Promise<unknown>;

/**
 * One group-commit queue: a row waits at most `delayMs` for others to share its statement, and
 * while a statement is in flight the rows arriving meanwhile wait and go together in the next,
 * sent when that one returns or when the oldest of them is due, whichever is later. (Sending
 * them as soon as the statement returned cut short the wait of rows that had just arrived: at
 * concurrency 1 a call that ends within the delay then found its start sent already, and its
 * row was written twice.)
 */
function groupCommit(execute: Runner, delayMs: number) {
  let queue: Item[] = [];
  let flushing = false;
  let closed = false;
  let scheduled: NodeJS.Timeout | null = null;
  let current: Promise<void> = Promise.resolve();
  const run = (force = false) => (current = drain(force));
  const unschedule = () => {
    if (scheduled) clearTimeout(scheduled);
    scheduled = null;
  };
  const schedule = (due: number) => {
    scheduled = setTimeout(() => void run(), Math.max(0, due - performance.now())).unref();
  };

  async function writeAlone(item: Item): Promise<void> {
    try {
      await execute([item.row]);
      item.resolve();
    } catch (err) {
      const delay = RETRY_DELAYS_MS[item.attempt];
      if (closed || refusedAsSuch(err) || delay === undefined) return item.reject(err);
      setTimeout(() => enqueue({ ...item, attempt: item.attempt + 1 }), delay).unref();
    }
  }

  /** Writes what is queued; `force` (close) sends it without waiting for rows not yet due. */
  async function drain(force: boolean): Promise<void> {
    scheduled = null;
    flushing = true;
    while (queue.length) {
      // The queue is in arrival order, so its first row is the first due; a full batch goes at
      // once. Within a millisecond of due counts as due: timers run on the event loop's
      // millisecond clock and may fire a fraction of one early.
      if (!force && queue.length < MAX_BATCH && queue[0].due - performance.now() > 1) {
        schedule(queue[0].due);
        break;
      }
      const batch = queue.slice(0, MAX_BATCH);
      queue = queue.slice(batch.length);
      // Lock order by id, so two replicas' batches cannot deadlock on the same rows.
      const byId = new Map<string, QueuedRow>();
      for (const item of batch) {
        const earlier = byId.get(item.row.id);
        byId.set(item.row.id, earlier ? { ...earlier, ...item.row } : item.row);
      }
      const rows = [...byId.values()].sort((a, b) => (a.id < b.id ? -1 : 1));
      try {
        await execute(rows);
        for (const item of batch) item.resolve();
      } catch {
        // Which row broke the batch is not said: each is written alone, so only it fails.
        if (batch.length === 1) await writeAlone(batch[0]);
        else for (const item of batch) await writeAlone(item);
      }
    }
    flushing = false;
  }

  function enqueue(item: Omit<Item, 'due'>, delay = delayMs): void {
    if (closed) return item.reject(new Error('recorder closed'));
    const due = performance.now() + delay;
    // A row due sooner than those waiting takes them along: the queue stays in order of due.
    const sooner = delay < delayMs;
    if (sooner) for (const queued of queue) queued.due = Math.min(queued.due, due);
    queue.push({ ...item, due });
    // While a statement is in flight, the drain that runs it sends this one after it; a row at
    // the queue's own delay is due last, so a timer already set for the first stays right.
    if (flushing || (scheduled && !sooner)) return;
    unschedule();
    schedule(queue[0].due);
  }

  return {
    /** Queues `row`, sent within `delay` ms (the queue's delay unless said). */
    write: (row: QueuedRow, delay?: number) =>
      new Promise<void>((resolve, reject) => enqueue({ row, attempt: 0, resolve, reject }, delay)),
    /**
     * Folds `row` into the queued item of the same id, if one is still waiting: the two go out
     * as one row in its statement. Resolves with that item; null if none is waiting.
     */
    absorb(row: QueuedRow): Promise<void> | null {
      // The queue holds what arrived within the delay or one statement's time: a few rows.
      const item = queue.find((queued) => queued.row.id === row.id);
      if (!item) return null;
      item.row = { ...item.row, ...row };
      return new Promise<void>((resolve, reject) => {
        const [resolved, rejected] = [item.resolve, item.reject];
        item.resolve = () => (resolved(), resolve());
        item.reject = (err) => (rejected(err), reject(err));
      });
    },
    /** Writes what is queued now instead of after its delay; resolves once that is written (or failed). */
    async flush(): Promise<void> {
      unschedule();
      await current; // a statement in flight, which may have scheduled what queued behind it
      unschedule();
      if (queue.length) await run(true);
    },
    close(): void {
      closed = true;
      unschedule();
      for (const item of queue.splice(0)) item.reject(new Error('recorder closed'));
    },
  };
}

/**
 * Starts go on `session` (the connection holding the owner lock, so every `running` row names
 * a live owner), completions on `completions`, a second connection: a completion's statement
 * runs the analytics trigger (milliseconds on a hot rollup row), which a start, awaited by its
 * caller's first byte, must not queue behind. Both default to new sessions on the ORM's
 * database, closed with it.
 */
export function createInvocationRecorder(
  orm: MikroORM,
  session: RowSession = createRowSession(String(orm.config.get('clientUrl'))),
  completions: RowSession = createRowSession(String(orm.config.get('clientUrl')), { lock: false }),
): InvocationRecorder {
  const starts = groupCommit((rows) => session.run((owner) => statementFor(rows, owner)), START_DELAY_MS);
  const ends = groupCommit((rows) => completions.run(() => statementFor(rows, session.owner)), COMPLETION_DELAY_MS);
  const recorder: InvocationRecorder = {
    start: starts.write,
    async markForwarding(id) {
      const rows = await session.run((owner) => ({
        name: 'gw_stream_forwarding',
        sql: MARK_FORWARDING,
        params: [owner, id],
      }));
      return rows.length === 1;
    },
    async insertWith(row, build) {
      const rows = await session.run((owner) => {
        const statement = build(ROW_INSERT);
        return { ...statement, params: [JSON.stringify([recordOf(row as QueuedRow, owner)]), ...statement.params] };
      });
      return rows.length;
    },
    // A call that ends before its start was sent is written once, whole, in the start's place.
    complete: (row, now) => starts.absorb(row) ?? ends.write(row, now ? 0 : undefined),
    async close() {
      // A graceful stop writes what is queued (starts held for company, completions waiting to
      // share a statement) before the connections close, instead of failing it; bounded, so a
      // database that is gone cannot hold the stop.
      const flushed = Promise.all([starts.flush(), ends.flush()]).catch(() => undefined);
      await Promise.race([flushed, sleep(CLOSE_FLUSH_MS, undefined, { ref: false })]);
      starts.close();
      ends.close();
      await Promise.all([session.close(), completions.close()]);
    },
  };
  closeWithOrm(orm, () => recorder.close());
  return recorder;
}
