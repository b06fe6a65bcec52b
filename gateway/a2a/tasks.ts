// Task binding: a task id the gateway has seen in an upstream's answer through one agent is
// bound to that agent, its tenant and the caller side that made the call (table `a2a_tasks`),
// and a request about a task (GetTask, CancelTask, SubscribeToTask, the push-notification config
// methods, a message continuing or referring to a task) passes only when every task it names is
// bound to the agent it is sent through and to its caller side. So one tenant's callers never
// reach another tenant's tasks, even on an upstream the two share, and a public agent's payer
// never reaches another payer's: an id learnt elsewhere is refused before the upstream sees it.
// The caller side (taskCaller): a public call's payer (`x402:<address>`), or '' for the tenant's
// /v1 side, where every token of the tenant reaches the tasks any of them created (a tenant's
// users share its agents, records and analytics the same way).
//
// Bindings are written before the answer that names them has ended (api/proxy/a2a.ts a2aAnswerTap), so
// a caller that asks about a task it was just told of finds it bound, on any replica. Bound
// pairs are remembered per process for ten minutes: a binding is taken back only by retention
// (A2A_TASK_RETENTION_DAYS, workflows/retention.ts), which a process then sees within that time.
import { LRUCache } from 'lru-cache';
import type { TaskSeen } from './methods.ts';

type Query = (sql: string, params: unknown[]) => Promise<Array<Record<string, unknown>>>;

/** Whose a task is within its agent: a payer's user id, or '' for the tenant's /v1 side. */
export type TaskCaller = string;

/** The caller side of a call: a public call's payer, else the tenant's side (''). */
export function taskCaller(caller: { kind: string; userId: string }): TaskCaller {
  return caller.kind === 'x402' ? caller.userId : '';
}

export type TaskBindings = {
  /** Binds the tasks to the agent, its tenant and the caller side; a task bound already stays as it is. */
  bind(tenantId: string, agentId: string, caller: TaskCaller, tasks: TaskSeen[]): Promise<void>;
  /** Whether every task is bound to this agent in this tenant, for this caller side. */
  allBound(tenantId: string, agentId: string, caller: TaskCaller, taskIds: string[]): Promise<boolean>;
};

const key = (tenantId: string, agentId: string, caller: TaskCaller, taskId: string) =>
  `${tenantId}\0${agentId}\0${caller}\0${taskId}`;

const REMEMBERED_MS = 10 * 60_000;

export function createTaskBindings(query: Query, remembered = 100_000): TaskBindings {
  const known = new LRUCache<string, true>({ max: remembered, ttl: REMEMBERED_MS });
  return {
    async bind(tenantId, agentId, caller, tasks) {
      const fresh = tasks.filter((t) => !known.has(key(tenantId, agentId, caller, t.taskId)));
      if (fresh.length === 0) return;
      const inserted = await query(
        `insert into a2a_tasks (tenant_id, agent_id, caller, task_id, context_id)
           select ?, ?, ?, t.task_id, t.context_id
             from json_to_recordset(?::json) as t(task_id text, context_id text)
         on conflict (agent_id, task_id) do nothing
         returning task_id`,
        [tenantId, agentId, caller, JSON.stringify(fresh.map((t) => ({ task_id: t.taskId, context_id: t.contextId })))],
      );
      // Only the rows this insert wrote are remembered: a task bound before, perhaps to another
      // caller side, stays as it was, and allBound reads whose it is.
      for (const row of inserted) known.set(key(tenantId, agentId, caller, row.task_id as string), true);
    },
    async allBound(tenantId, agentId, caller, taskIds) {
      const unknown = [...new Set(taskIds)].filter((id) => !known.has(key(tenantId, agentId, caller, id)));
      if (unknown.length === 0) return true;
      const rows = await query(
        `select task_id from a2a_tasks
          where tenant_id = ? and agent_id = ? and caller = ? and task_id in (select json_array_elements_text(?::json))`,
        [tenantId, agentId, caller, JSON.stringify(unknown)],
      );
      for (const row of rows) known.set(key(tenantId, agentId, caller, row.task_id as string), true);
      return rows.length === unknown.length;
    },
  };
}
