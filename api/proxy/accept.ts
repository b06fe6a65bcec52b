// Writing an accepted transactional call: its body (the claim check) and its `pending` row,
// in one commit. Unpaid calls — nearly all — take one statement (a data-modifying CTE when the
// body store lives in this database: one round trip, one commit; measured 0.7 ms against
// 2.3–2.8 ms for the same two rows through MikroORM's unit of work). A paid call goes through
// the payment module's transaction, which binds the payment to the row (one payment buys one
// call) or writes nothing.
import type { MikroORM } from '@mikro-orm/postgresql';
import { InvocationSchema, type Invocation } from '../db/entities.ts';
import { flushBindingPayment, removeUnstartedCall } from '../payment/claims.ts';
import { decisionInsertSql, type DecisionRecord } from '../policy/store.ts';
import type { BodyStore } from './body-store.ts';
import type { PaymentRecord } from './call.ts';

export type AcceptedRow = Omit<Invocation, 'requestBodyId' | 'responseBodyId' | 'responseContentType' | 'upstreamStatus' | 'latencyMs' | 'ttftMs' | 'errorClass' | 'completedAt' | 'status' | 'mode' | 'attempts' | 'responseSha256'>;

const COLUMNS: Array<[string, (r: AcceptedRow & { requestBodyId: string }) => unknown]> = [
  ['id', (r) => r.id],
  ['tenant_id', (r) => r.tenantId],
  ['agent_id', (r) => r.agentId],
  ['mode', () => 'transactional'],
  ['status', () => 'pending'],
  ['request_id', (r) => r.requestId],
  ['caller', (r) => r.caller],
  ['model', (r) => r.model ?? null],
  ['content_type', (r) => r.contentType ?? null],
  ['request_headers', (r) => JSON.stringify(r.requestHeaders)],
  ['request_body_id', (r) => r.requestBodyId],
  ['request_bytes', (r) => r.requestBytes ?? null],
  ['attempts', () => 0],
  ['mcp_method', (r) => r.mcpMethod ?? null],
  ['mcp_tool', (r) => r.mcpTool ?? null],
  ['payment_network', (r) => r.paymentNetwork ?? null],
  ['payment_asset', (r) => r.paymentAsset ?? null],
  ['payment_amount', (r) => r.paymentAmount ?? null],
  ['payment_payer', (r) => r.paymentPayer ?? null],
  ['payment_nonce', (r) => r.paymentNonce ?? null],
  ['payment_transaction', (r) => r.paymentTransaction ?? null],
  ['created_at', (r) => r.createdAt],
  ['updated_at', (r) => r.updatedAt],
];
const ROW_SQL = `insert into invocations (${COLUMNS.map(([c]) => c).join(', ')}) values (${COLUMNS.map(([c]) => (c === 'request_headers' ? '?::jsonb' : '?')).join(', ')})`;

/**
 * `decision`: the call's policy decision, when the policy stage left it to this commit
 * (policy/stage.ts): written in the same statement, so it commits with the row.
 */
export async function writeAccepted(orm: MikroORM, bodies: BodyStore, row: AcceptedRow, body: Buffer, payment: PaymentRecord | null, decision: DecisionRecord | null = null): Promise<void> {
  const conn = orm.em.getConnection();
  const ctes: Array<[string, { sql: string; params: unknown[] }]> = decision ? [['decision', decisionInsertSql(decision)]] : [];
  if (payment) {
    // Not left to this commit by the policy stage (a priced agent); written alone if it were.
    for (const [, insert] of ctes) await conn.execute(insert.sql, insert.params);
    const em = orm.em.fork();
    const requestBodyId = await bodies.stage(em, row.tenantId, row.contentType ?? null, body);
    em.create(InvocationSchema, { ...row, requestBodyId, mode: 'transactional', status: 'pending', attempts: 0 });
    return flushBindingPayment(em, payment, row.id);
  }
  const inline = bodies.insertSql?.(row.tenantId, row.contentType ?? null, body);
  if (inline) ctes.unshift(['body', inline]);
  const requestBodyId = inline ? inline.id : await bodies.put(row.tenantId, row.contentType ?? null, body);
  const stored = { ...row, requestBodyId };
  const values = COLUMNS.map(([, get]) => get(stored));
  // Data-modifying CTEs: every part runs, in one statement and one commit.
  const withClause = ctes.length ? `with ${ctes.map(([name, insert]) => `${name} as (${insert.sql})`).join(', ')} ` : '';
  await conn.execute(`${withClause}${ROW_SQL}`, [...ctes.flatMap(([, insert]) => insert.params), ...values]);
}

/**
 * Undoes an accepted row whose workflow could not be started (its body stays, an orphan),
 * releasing its payment. Only a row no attempt has claimed (still `pending`): false means the
 * start reached Temporal after all and its workflow is running the call.
 */
export function removeAccepted(orm: MikroORM, id: string): Promise<boolean> {
  return removeUnstartedCall(orm.em.fork(), id);
}
