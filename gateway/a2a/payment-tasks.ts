// Payment tasks of the x402 A2A transport (gateway/a2a/x402.ts): when a public A2A agent asks for
// payment in an `input-required` task, the message it was sent is kept here under the task id
// the gateway minted, so the paying message (which names that id and carries the payment) runs
// the work the first message asked for. A row is the JSON-RPC request as it will be forwarded
// (no payment keys), bounded in size, for the agent it was sent to; it is read only through that
// agent. The paying message whose payment verified takes it for that payment (payer and nonce)
// before it settles: another payment can no longer use it, the same one sent again (its
// settlement not known yet) still can, and the facilitator settles that authorization at most
// once. It goes when it expires (the requirement's maxTimeoutSeconds: a payment signed for it is
// no longer valid after that), when declined unpaid, or, expired, when later rows are written and
// within a minute in any case (purgeExpiredInBackground).
// Each tenant holds a bounded number of live rows, so anonymous callers, already limited by the
// challenge buckets, cannot make it store more than that; and each client (by a digest of its
// rate-limit identity, never its address) a tenth of that, so filling one tenant's rows, which
// refuses its real payers' unpaid messages until rows expire, takes many client addresses, not
// the few that a client's challenge rate times a row's lifetime would.
import { createHash } from 'node:crypto';
import { runRounds, type Rounds } from '../../lib/rounds.ts';

type Query = (sql: string, params: unknown[]) => Promise<Array<Record<string, unknown>>>;

/** The largest request kept (the serialized JSON-RPC request). */
export const MAX_PAYMENT_TASK_BYTES = 64 * 1024;
/** Live (unexpired) payment tasks per tenant, and per client over every tenant. */
const MAX_PAYMENT_TASKS_PER_TENANT = 1000;
const MAX_PAYMENT_TASKS_PER_CLIENT = MAX_PAYMENT_TASKS_PER_TENANT / 10;
/** Expired rows removed by each write. */
const PURGE_BATCH = 100;

type PaymentTask = { taskId: string; contextId: string; method: string; request: string };

export type PaymentTasks = {
  /**
   * Keeps the request sent by `client` (its rate-limit identity); false when the tenant, or the
   * client, already holds its maximum of live payment tasks.
   */
  save(tenantId: string, agentId: string, task: PaymentTask, ttlSeconds: number, client: string): Promise<boolean>;
  /** The unexpired payment task of this agent with this id, or null. */
  find(agentId: string, taskId: string): Promise<PaymentTask | null>;
  /** Removes it unless a payment took it (the client declined to pay). */
  remove(agentId: string, taskId: string): Promise<void>;
  /** Takes it for the payment `paidBy` (payer and nonce): false when another payment took it first. */
  take(agentId: string, taskId: string, paidBy: string): Promise<boolean>;
  /**
   * Moves the task taken by the payment `paidBy` to the new id `newTaskId`, free again for
   * `ttlSeconds`, its message kept: the payment was refused with a corrective answer (a channel
   * voucher that lost its state) and the payer pays again for the same message. The row is the
   * same one, so the message is neither lost nor counted twice. False when no such task is kept.
   */
  reissue(agentId: string, taskId: string, paidBy: string, newTaskId: string, ttlSeconds: number): Promise<boolean>;
  /** Removes up to `limit` expired rows, the oldest first; answers how many. */
  purgeExpired(limit?: number): Promise<number>;
};

const clientDigest = (client: string) => createHash('sha256').update(`a2a-payment-task:${client}`).digest('hex');

export function createPaymentTasks(
  query: Query,
  maxPerTenant = MAX_PAYMENT_TASKS_PER_TENANT,
  maxPerClient = MAX_PAYMENT_TASKS_PER_CLIENT,
): PaymentTasks {
  const store: PaymentTasks = {
    async save(tenantId, agentId, task, ttlSeconds, client) {
      if (Buffer.byteLength(task.request, 'utf8') > MAX_PAYMENT_TASK_BYTES)
        throw new Error('payment task request over the bound');
      const digest = clientDigest(client);
      await store.purgeExpired();
      const rows = await query(
        `insert into a2a_payment_tasks (task_id, tenant_id, agent_id, context_id, method, request, client_key, expires_at)
           select ?, ?, ?, ?, ?, ?, ?, now() + make_interval(secs => ?)
            where (select count(*) from (select 1 from a2a_payment_tasks
                     where tenant_id = ? and expires_at > now() limit ?) live) < ?
              and (select count(*) from (select 1 from a2a_payment_tasks
                     where client_key = ? and expires_at > now() limit ?) mine) < ?
         returning task_id`,
        [
          task.taskId,
          tenantId,
          agentId,
          task.contextId,
          task.method,
          task.request,
          digest,
          ttlSeconds,
          tenantId,
          maxPerTenant,
          maxPerTenant,
          digest,
          maxPerClient,
          maxPerClient,
        ],
      );
      return rows.length === 1;
    },
    async find(agentId, taskId) {
      const [row] = await query(
        `select task_id, context_id, method, request from a2a_payment_tasks
          where agent_id = ? and task_id = ? and expires_at > now()`,
        [agentId, taskId],
      );
      if (!row) return null;
      return {
        taskId: row.task_id as string,
        contextId: row.context_id as string,
        method: row.method as string,
        request: row.request as string,
      };
    },
    async remove(agentId, taskId) {
      await query(`delete from a2a_payment_tasks where agent_id = ? and task_id = ? and paid_by is null`, [
        agentId,
        taskId,
      ]);
    },
    async purgeExpired(limit = PURGE_BATCH) {
      const rows = await query(
        `delete from a2a_payment_tasks where task_id in
           (select task_id from a2a_payment_tasks where expires_at < now() order by expires_at limit ?)
         returning task_id`,
        [limit],
      );
      return rows.length;
    },
    async take(agentId, taskId, paidBy) {
      const rows = await query(
        `update a2a_payment_tasks set paid_by = ?
          where agent_id = ? and task_id = ? and expires_at > now() and (paid_by is null or paid_by = ?)
         returning task_id`,
        [paidBy, agentId, taskId, paidBy],
      );
      return rows.length === 1;
    },
    async reissue(agentId, taskId, paidBy, newTaskId, ttlSeconds) {
      const rows = await query(
        `update a2a_payment_tasks set task_id = ?, paid_by = null, expires_at = now() + make_interval(secs => ?)
          where agent_id = ? and task_id = ? and paid_by = ? and expires_at > now()
         returning task_id`,
        [newTaskId, ttlSeconds, agentId, taskId, paidBy],
      );
      return rows.length === 1;
    },
  };
  return store;
}

/** How often each API process removes expired payment tasks, whether or not new ones are written. */
const PURGE_EVERY_MS = 60_000;

/**
 * Expired payment tasks go within a minute even when no new one is written: a kept message is a
 * request body, and the agent may not capture bodies.
 */
export function purgeExpiredInBackground(tasks: PaymentTasks, onError: (err: unknown) => void): Rounds {
  return runRounds(
    PURGE_EVERY_MS,
    async () => {
      while ((await tasks.purgeExpired(1000)) === 1000);
    },
    onError,
  );
}
