// Writes streaming invocation rows off the call's latency path, through one group-commit
// queue: while one statement is in flight, the rows that arrive meanwhile wait and then go
// together in one multi-row statement. Idle, a row is written at once (no added delay);
// busy, N rows cost one round trip and one commit instead of N (which matters most for
// completions: the analytics trigger folds each completed row into its agent's hourly
// rollup row, so separate completions of one agent would queue on that row's lock).
//
// Every queued item is a whole row, written as an upsert: the start inserts it `running`;
// the completion inserts it whole or, when the start is there, completes it (only a row
// still `running`: a terminal row is never rewritten). So a completion never depends on its
// start having been written, and a start and completion that meet in one batch are written
// as one row. A receipt (emit_receipts) is written in the completion's statement, for the
// row it completed: the row's completion and its receipt commit together or not at all.
//
// One bad row must not lose the others: a batch that fails is written again row by row, and
// a row that fails for a reason that may pass (the database unreachable, a deadlock) is
// retried a few times with backoff; only a row the database refuses as such is dropped (and
// logged by the caller).
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Invocation } from '../db/entities.ts';

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
  /** Resolves once the `running` row is committed. */
  start(row: StartedRow): Promise<void>;
  /** Writes the whole terminal row (completing the started one); resolves once committed. */
  complete(row: CompletedRow): Promise<void>;
}

type QueuedRow = Omit<StartedRow, 'status' | 'completedAt'> & Partial<Omit<CompletedRow, 'status' | 'completedAt'>> & { status: string; completedAt?: Date | null };

const MAX_BATCH = 256;
const RETRY_DELAYS_MS = [200, 1_000, 3_000, 10_000];

const COLUMNS = [
  'id',
  'tenant_id',
  'agent_id',
  'mode',
  'status',
  'request_id',
  'caller',
  'model',
  'content_type',
  'request_bytes',
  'mcp_method',
  'mcp_tool',
  'attempts',
  'payment_network',
  'payment_asset',
  'payment_amount',
  'payment_payer',
  'payment_nonce',
  'payment_transaction',
  'error_class',
  'upstream_status',
  'latency_ms',
  'ttft_ms',
  'response_content_type',
  'request_sha256',
  'response_sha256',
  'created_at',
  'updated_at',
  'completed_at',
];

// What a completion sets on a started row.
const COMPLETED = ['status', 'error_class', 'upstream_status', 'latency_ms', 'ttft_ms', 'response_content_type', 'request_sha256', 'response_sha256', 'updated_at', 'completed_at'];

const ROW = `(${COLUMNS.map(() => '?').join(', ')})`;

function paramsOf(r: QueuedRow): unknown[] {
  return [
    r.id,
    r.tenantId,
    r.agentId,
    'streaming',
    r.status,
    r.requestId,
    r.caller,
    r.model ?? null,
    r.contentType ?? null,
    r.requestBytes ?? null,
    r.mcpMethod ?? null,
    r.mcpTool ?? null,
    1,
    r.paymentNetwork ?? null,
    r.paymentAsset ?? null,
    r.paymentAmount ?? null,
    r.paymentPayer ?? null,
    r.paymentNonce ?? null,
    r.paymentTransaction ?? null,
    r.errorClass ?? null,
    r.upstreamStatus ?? null,
    r.latencyMs ?? null,
    r.ttftMs ?? null,
    r.responseContentType ?? null,
    r.requestSha256 ?? null,
    r.responseSha256 ?? null,
    r.createdAt,
    r.completedAt ?? r.createdAt,
    r.completedAt ?? null,
  ];
}

/** One statement for the rows (distinct ids), with their receipts. */
function statementFor(rows: QueuedRow[]): { sql: string; params: unknown[] } {
  const upsert = `insert into invocations (${COLUMNS.join(', ')}) values ${rows.map(() => ROW).join(', ')}
    on conflict (id) do update set ${COMPLETED.map((c) => `${c} = excluded.${c}`).join(', ')}
    where invocations.status = 'running' and excluded.status <> 'running'`;
  const params = rows.flatMap(paramsOf);
  const receipts = rows.filter((r) => r.receipt);
  if (receipts.length === 0) return { sql: upsert, params };
  return {
    // Only for the rows this statement wrote: a receipt always matches its row.
    sql: `with written as (${upsert} returning id)
      insert into receipts (invocation_id, tenant_id, agent_id, kid, jws)
      select v.invocation_id, v.tenant_id, v.agent_id, v.kid, v.jws
        from (values ${receipts.map(() => '(?, ?, ?, ?, ?)').join(', ')}) as v(invocation_id, tenant_id, agent_id, kid, jws)
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

export function createInvocationRecorder(orm: MikroORM): InvocationRecorder {
  const execute = (rows: QueuedRow[]) => {
    const { sql, params } = statementFor(rows);
    return orm.em.getConnection().execute(sql, params);
  };

  let queue: Item[] = [];
  let flushing = false;

  async function writeAlone(item: Item): Promise<void> {
    try {
      await execute([item.row]);
      item.resolve();
    } catch (err) {
      const delay = RETRY_DELAYS_MS[item.attempt];
      if (refusedAsSuch(err) || delay === undefined) return item.reject(err);
      setTimeout(() => enqueue({ ...item, attempt: item.attempt + 1 }), delay).unref();
    }
  }

  async function drain(): Promise<void> {
    flushing = true;
    while (queue.length) {
      const batch = queue.slice(0, MAX_BATCH);
      queue = queue.slice(batch.length);
      // A start and its completion in one batch become one row (the later item wins); lock
      // order by id, so two replicas' batches cannot deadlock on the same rows.
      const byId = new Map<string, QueuedRow>();
      for (const item of batch) {
        const seen = byId.get(item.row.id);
        // A start retried after its completion must not turn the row back to running.
        if (seen && seen.status !== 'running' && item.row.status === 'running') continue;
        byId.set(item.row.id, { ...seen, ...item.row });
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

  function enqueue(item: Item): void {
    queue.push(item);
    if (!flushing) void drain();
  }

  const write = (row: QueuedRow) => new Promise<void>((resolve, reject) => enqueue({ row, attempt: 0, resolve, reject }));
  return { start: write, complete: write };
}
