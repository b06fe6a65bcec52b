// Writes streaming invocation rows: one insert as the call starts, one completion at its end.
// Both go through a group-commit queue: while one statement is in flight, the rows that
// arrive meanwhile wait and then go together in one multi-row statement. Idle, a row is
// written at once (no added delay); busy, N rows cost one round trip and one commit instead
// of N. That matters most for completions: the analytics trigger folds each completed row
// into its agent's hourly rollup row, so N separate completions of one agent would queue on
// that row's lock, one commit at a time.
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

export interface InvocationRecorder {
  /** Resolves once the row is committed. */
  start(row: StartedRow): Promise<void>;
  /** Completes a `running` row (a terminal row is left as it is). */
  complete(completion: Completion): Promise<void>;
}

const MAX_BATCH = 256;

/** Runs `flush` on everything queued, one statement at a time. */
function groupCommit<T>(flush: (items: T[]) => Promise<void>): (item: T) => Promise<void> {
  let queue: Array<{ item: T; resolve: () => void; reject: (err: unknown) => void }> = [];
  let flushing = false;
  async function drain(): Promise<void> {
    flushing = true;
    while (queue.length) {
      const batch = queue.slice(0, MAX_BATCH);
      queue = queue.slice(batch.length);
      try {
        await flush(batch.map((b) => b.item));
        for (const b of batch) b.resolve();
      } catch (err) {
        for (const b of batch) b.reject(err);
      }
    }
    flushing = false;
  }
  return (item) =>
    new Promise<void>((resolve, reject) => {
      queue.push({ item, resolve, reject });
      if (!flushing) void drain();
    });
}

const INSERT_COLUMNS = [
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
  'created_at',
  'updated_at',
  'completed_at',
];

export function createInvocationRecorder(orm: MikroORM): InvocationRecorder {
  const execute = (sql: string, params: unknown[]) => orm.em.getConnection().execute(sql, params);

  const start = groupCommit<StartedRow>(async (rows) => {
    const placeholders = `(${INSERT_COLUMNS.map(() => '?').join(', ')})`;
    const params = rows.flatMap((r) => [
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
      r.createdAt,
      r.completedAt ?? r.createdAt,
      r.completedAt ?? null,
    ]);
    await execute(`insert into invocations (${INSERT_COLUMNS.join(', ')}) values ${rows.map(() => placeholders).join(', ')}`, params);
  });

  const complete = groupCommit<Completion>(async (rows) => {
    // Lock order by id, so two replicas' batches cannot deadlock on the same rows.
    const sorted = [...rows].sort((a, b) => (a.id < b.id ? -1 : 1));
    const at = new Date();
    const params = sorted.flatMap((c) => [c.id, c.status, c.upstreamStatus, c.errorClass, c.latencyMs, c.ttftMs, c.responseContentType]);
    const values = sorted.map(() => '(?, ?, ?::integer, ?, ?::bigint, ?::bigint, ?)').join(', ');
    await execute(
      `update invocations as i
          set status = v.status, upstream_status = v.upstream_status, error_class = v.error_class,
              latency_ms = v.latency_ms, ttft_ms = v.ttft_ms, response_content_type = v.response_content_type,
              updated_at = ?, completed_at = ?
         from (values ${values}) as v(id, status, upstream_status, error_class, latency_ms, ttft_ms, response_content_type)
        where i.id = v.id and i.status = 'running'`,
      [at, at, ...params],
    );
  });

  return { start, complete };
}
