// Writes streaming invocation rows off the call's latency path, through two group-commit
// queues on connections of the process's own (row-session.ts): while one statement is in
// flight, the rows that arrive meanwhile wait and then go together in one multi-row
// statement, so N rows cost one round trip and one commit instead of N (which matters most
// for completions: the analytics trigger folds each completed row into its agent's hourly
// rollup row, so separate completions of one agent would queue on that row's lock).
// - Starts go on the row session, which holds the owner lock every row names; one is sent at
//   the end of the event-loop turn that queued it (the starts of one turn share a statement).
//   Nobody waits for it (stream.ts).
// - Completions go on a second connection, so a start never queues behind a completion's
//   trigger; one is sent at most COMPLETION_DELAY_MS after it was queued, so at low
//   concurrency the completions of several calls share one write and one commit.
//
// Every queued item is a whole row, written as an upsert: the start inserts it `running`;
// the completion inserts it whole or, when the start is there, completes it (only a row
// still `running`, or one the stale-stream sweep failed as `gateway_lost`: no other terminal row is rewritten). So a completion never depends on its
// start having been written, and a start that arrives after its completion changes nothing.
// A receipt (emit_receipts) is written in the completion's statement, for the row it
// completed: the row's completion and its receipt commit together or not at all.
//
// One bad row must not lose the others: a batch that fails is written again row by row, and
// a row that fails for a reason that may pass (the database unreachable, a deadlock) is
// retried a few times with backoff; only a row the database refuses as such is dropped (and
// logged by the caller).
import type { MikroORM } from '@mikro-orm/postgresql';
import { createRowSession, type RowSession } from './row-session.ts';
import type { Invocation } from '../db/entities.ts';
import { ADMITTED_CALL_FIELDS, invocationColumns, type InvocationFields } from './invocation-columns.ts';

export type StartedRow = Pick<
  Invocation,
  | 'id'
  | 'tenantId'
  | 'agentId'
  | 'status'
  | 'requestId'
  | 'caller'
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
  Partial<Omit<Completion, 'id' | 'status'>> & { completedAt?: Date | null };

export type Completion = {
  id: string;
  status: 'succeeded' | 'failed';
  upstreamStatus: number | null;
  errorClass: string | null;
  latencyMs: number | null;
  ttftMs: number | null;
  responseContentType: string | null;
};

/** A signed receipt for the completed row, stored with its completion. */
export type RowReceipt = { kid: string; jws: string };

export type CompletedRow = StartedRow &
  Completion & {
    completedAt: Date;
    requestSha256?: string | null;
    responseSha256?: string | null;
    receipt?: RowReceipt | null;
  };

export interface InvocationRecorder {
  /**
   * Resolves once the `running` row is committed. It is sent at the end of this event-loop
   * turn (or when the statement in flight returns); once sent, it commits even if this
   * process dies (row-session.ts).
   */
  start(row: StartedRow): Promise<void>;
  /** Writes the whole terminal row (completing the started one); resolves once committed. */
  complete(row: CompletedRow): Promise<void>;
  /** Stops writing (pending rows are failed) and closes the row session. */
  close(): Promise<void>;
}

type QueuedRow = Omit<StartedRow, 'status' | 'completedAt'> & Partial<Omit<CompletedRow, 'status' | 'completedAt'>> & { status: string; completedAt?: Date | null };

const MAX_BATCH = 256;
/** How long a completion may wait for others to share its statement. */
export const COMPLETION_DELAY_MS = 10;
const RETRY_DELAYS_MS = [200, 1_000, 3_000, 10_000];

// The row's fields, in column order (names from the shared mapping, invocation-columns.ts).
const ROW = invocationColumns([
  ...ADMITTED_CALL_FIELDS,
  'errorClass',
  'upstreamStatus',
  'latencyMs',
  'ttftMs',
  'responseContentType',
  'requestSha256',
  'responseSha256',
  'completedAt',
  'owner',
] as const);
const COLUMNS = ROW.names;

// What a completion sets on a started row.
const COMPLETED = invocationColumns(['status', 'errorClass', 'upstreamStatus', 'latencyMs', 'ttftMs', 'responseContentType', 'requestSha256', 'responseSha256', 'updatedAt', 'completedAt'] as const).names;

function paramsOf(r: QueuedRow, owner: string): unknown[] {
  return ROW.values({
    ...r,
    status: r.status as InvocationFields['status'],
    mode: 'streaming',
    attempts: 1,
    updatedAt: r.completedAt ?? r.createdAt,
    owner,
  });
}

/** `($1, $2, ...), (...)`: `count` tuples of `width` numbered parameters from `from`. */
function tuples(count: number, width: number, from = 1): string {
  const out: string[] = [];
  for (let i = 0, n = from; i < count; i++) {
    const one: string[] = [];
    for (let j = 0; j < width; j++) one.push(`$${n++}`);
    out.push(`(${one.join(', ')})`);
  }
  return out.join(', ');
}

/**
 * One statement for the rows (distinct ids), with their receipts. A start meeting a row that is
 * there already (a paid call's row, inserted with its payment binding) only gives it its owner.
 */
function statementFor(rows: QueuedRow[], owner: string): { sql: string; params: unknown[] } {
  const upsert = `insert into invocations (${COLUMNS.join(', ')}) values ${tuples(rows.length, COLUMNS.length)}
    on conflict (id) do update set owner = case when excluded.status = 'running' then excluded.owner else invocations.owner end, ${COMPLETED.map((c) => `${c} = case when excluded.status = 'running' then invocations.${c} else excluded.${c} end`).join(', ')}
    where (invocations.status = 'running' and (excluded.status <> 'running' or invocations.owner is distinct from excluded.owner))
       -- The sweep's verdict is a guess (the owner's lock was free: its process, or only its row
       -- connection, was lost); the process's own completion, if it comes, is the truth.
       or (invocations.error_class = 'gateway_lost' and excluded.status <> 'running')`;
  const params = rows.flatMap((r) => paramsOf(r, owner));
  const receipts = rows.filter((r) => r.receipt);
  if (receipts.length === 0) return { sql: upsert, params };
  return {
    // Only for the rows this statement wrote: a receipt always matches its row.
    sql: `with written as (${upsert} returning id)
      insert into receipts (invocation_id, tenant_id, agent_id, kid, jws)
      select v.invocation_id, v.tenant_id, v.agent_id, v.kid, v.jws
        from (values ${tuples(receipts.length, 5, params.length + 1)}) as v(invocation_id, tenant_id, agent_id, kid, jws)
       where v.invocation_id in (select id from written)
      on conflict (invocation_id) do nothing`,
    params: [...params, ...receipts.flatMap((r) => [r.id, r.tenantId, r.agentId, r.receipt!.kid, r.receipt!.jws])],
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

type Item = { row: QueuedRow; attempt: number; resolve: () => void; reject: (err: unknown) => void };

type Runner = (rows: QueuedRow[]) => Promise<unknown>;

/**
 * One group-commit queue: while a statement is in flight the rows arriving meanwhile wait and
 * go together in the next. Idle, a flush is scheduled `delayMs` later (0: at the end of the
 * current event-loop turn, so the rows of one turn share it).
 */
function groupCommit(execute: Runner, delayMs: number) {
  let queue: Item[] = [];
  let flushing = false;
  let closed = false;
  let scheduled: NodeJS.Timeout | NodeJS.Immediate | null = null;

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

  async function drain(): Promise<void> {
    scheduled = null;
    flushing = true;
    while (queue.length) {
      const batch = queue.slice(0, MAX_BATCH);
      queue = queue.slice(batch.length);
      // Lock order by id, so two replicas' batches cannot deadlock on the same rows.
      const byId = new Map<string, QueuedRow>();
      for (const item of batch) byId.set(item.row.id, { ...byId.get(item.row.id), ...item.row });
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

  function enqueue(item: Item): void {
    if (closed) return item.reject(new Error('recorder closed'));
    queue.push(item);
    // While a statement is in flight, everything queued goes with the next one anyway.
    if (flushing || scheduled) return;
    scheduled = delayMs === 0 ? setImmediate(() => void drain()) : setTimeout(() => void drain(), delayMs).unref();
  }

  return {
    write: (row: QueuedRow) => new Promise<void>((resolve, reject) => enqueue({ row, attempt: 0, resolve, reject })),
    close(): void {
      closed = true;
      if (scheduled && delayMs === 0) clearImmediate(scheduled as NodeJS.Immediate);
      else if (scheduled) clearTimeout(scheduled as NodeJS.Timeout);
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
  const starts = groupCommit((rows) => session.run((owner) => statementFor(rows, owner)), 0);
  const ends = groupCommit((rows) => completions.run(() => statementFor(rows, session.owner)), COMPLETION_DELAY_MS);
  const recorder: InvocationRecorder = {
    start: starts.write,
    complete: ends.write,
    async close() {
      starts.close();
      ends.close();
      await Promise.all([session.close(), completions.close()]);
    },
  };
  // The sessions live as long as their ORM (shutdown, a test's replica), like the change feed.
  const closeOrm = orm.close.bind(orm);
  orm.close = async (force?: boolean) => {
    await recorder.close();
    return closeOrm(force);
  };
  return recorder;
}
