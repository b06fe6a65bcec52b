// Writing an accepted transactional call: its body (stored by id: gateway/body-store.ts) and its `pending` row,
// in one commit. Unpaid calls — nearly all — take one statement (a data-modifying CTE when the
// body store lives in this database: one round trip, one commit, far cheaper than the ORM's
// unit of work; docs/BENCHMARKS.md, "Proxy"), prepared once per
// connection on the statement pool (db/statement-pool.ts). A paid call goes through
// the payment module's transaction, which binds the payment to the row (one payment buys one
// call) or writes nothing.
import type { MikroORM } from '@mikro-orm/postgresql';
import { InvocationSchema, type Invocation } from '../db/entities.ts';
import { flushBindingPayment, type PaymentKey } from '../payment/binding.ts';
import { decisionInsertSql, type DecisionRecord } from '../policy/store.ts';
import type { BodyStore } from '../body-store.ts';
import { ADMITTED_CALL_FIELDS, invocationColumns } from './columns.ts';
import { numbered, type StatementPool } from '../db/statement-pool.ts';
import { keepAcceptedLease } from '../payment/channels/store.ts';
import { PaymentStillSettling } from '../payment/refusals.ts';

export type AcceptedRow = Omit<
  Invocation,
  | 'requestBodyId'
  | 'responseBodyId'
  | 'responseContentType'
  | 'upstreamStatus'
  | 'latencyMs'
  | 'ttftMs'
  | 'errorClass'
  | 'completedAt'
  | 'status'
  | 'mode'
  | 'attempts'
  | 'responseSha256'
  | 'paymentCharge'
  | 'meterReading'
  | 'paymentSettlement'
  | 'paymentSettleError'
  | 'chargeLeaseUntil'
  | 'streamEndsBy'
  | 'budgetId'
>;

// Every column an accepted row sets; the rest keep their defaults until the activity completes it.
const ROW = invocationColumns([
  ...ADMITTED_CALL_FIELDS,
  'requestHeaders',
  'requestBodyId',
  'pollKeySha256',
  'a2aTaskId',
  'a2aContextId',
]);
const ROW_SQL = `insert into invocations (${ROW.names.join(', ')}) values (${ROW.placeholders.join(', ')})`;
// The accept statement of each shape (which CTEs it has), numbered for preparing.
const STATEMENTS = new Map<string, string>();

function accepted(row: AcceptedRow, requestBodyId: string) {
  return { ...row, requestBodyId, mode: 'transactional' as const, status: 'pending' as const, attempts: 0 };
}

/** Where an accepted call is written: the ORM, the body store and the app's statement pool. */
export type AcceptStores = { orm: MikroORM; bodies: BodyStore; statements: StatementPool };

/**
 * `decision`: the call's policy decision, when the policy stage left it to this commit
 * (policy/stage.ts): written in the same statement, so it commits with the row.
 */
export async function writeAccepted(
  { orm, bodies, statements }: AcceptStores,
  row: AcceptedRow,
  body: Buffer,
  payment: (PaymentKey & { channel?: { id: string; leaseToken: string } | null }) | null,
  decision: DecisionRecord | null = null,
): Promise<void> {
  const ctes: Array<[string, { sql: string; params: unknown[] }]> = decision
    ? [['decision', decisionInsertSql(decision)]]
    : [];
  if (payment) {
    // Not left to this commit by the policy stage (a priced agent); written alone if it were.
    for (const [, insert] of ctes) await orm.em.getConnection().execute(insert.sql, insert.params);
    const em = orm.em.fork();
    const requestBodyId = await bodies.stage(em, row.tenantId, row.contentType ?? null, body);
    em.create(InvocationSchema, accepted(row, requestBodyId));
    // A channel payment's lease, taken for the admission alone, is extended with the accept for
    // the call's queue; one that lapsed meanwhile accepts nothing (the payer sends it again).
    const channel = payment.channel;
    return flushBindingPayment(
      em,
      payment,
      row.id,
      channel
        ? async (tx) => {
            if (!(await keepAcceptedLease(tx, channel))) throw new PaymentStillSettling();
          }
        : undefined,
    );
  }
  const inline = bodies.insertSql?.(row.tenantId, row.contentType ?? null, body);
  if (inline) ctes.unshift(['body', inline]);
  const requestBodyId = inline ? inline.id : await bodies.put(row.tenantId, row.contentType ?? null, body);
  const values = ROW.values(accepted(row, requestBodyId));
  // Data-modifying CTEs: every part runs, in one statement and one commit. The statement's
  // text depends only on which parts it has (each part's text is fixed), so it is built once
  // per shape and prepared once per shape and connection.
  const shape = `gw_accept${ctes.map(([name]) => `_${name}`).join('')}`;
  let sql = STATEMENTS.get(shape);
  if (!sql) {
    const withClause = ctes.length
      ? `with ${ctes.map(([name, insert]) => `${name} as (${insert.sql})`).join(', ')} `
      : '';
    STATEMENTS.set(shape, (sql = numbered(`${withClause}${ROW_SQL}`)));
  }
  await statements.run(shape, sql, [...ctes.flatMap(([, insert]) => insert.params), ...values]);
}
