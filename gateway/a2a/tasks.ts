// Task binding: a task id the gateway has seen in an upstream's answer through one agent is
// bound to that agent and its tenant (table `a2a_tasks`), and a request about a task (GetTask,
// CancelTask, SubscribeToTask, the push-notification config methods, a message continuing or
// referring to a task) passes only when every task it names is bound to the agent it is sent
// through. So one tenant's callers never reach another tenant's tasks, even on an upstream the
// two share: an id learnt elsewhere is refused before the upstream sees it.
//
// Bindings are written before the answer that names them has ended (api/proxy/a2a-tap.ts), so
// a caller that asks about a task it was just told of finds it bound, on any replica. Bound
// pairs are remembered per process (a binding is never taken back while its agent lives).
import { LRUCache } from 'lru-cache';
import type { TaskSeen } from './methods.ts';

type Query = (sql: string, params: unknown[]) => Promise<Array<Record<string, unknown>>>;

export type TaskBindings = {
  /** Binds the tasks to the agent (and its tenant); a task bound already stays as it is. */
  bind(tenantId: string, agentId: string, tasks: TaskSeen[]): Promise<void>;
  /** Whether every task is bound to this agent in this tenant. */
  allBound(tenantId: string, agentId: string, taskIds: string[]): Promise<boolean>;
};

const key = (tenantId: string, agentId: string, taskId: string) => `${tenantId}\0${agentId}\0${taskId}`;

export function createTaskBindings(query: Query, remembered = 100_000): TaskBindings {
  const known = new LRUCache<string, true>({ max: remembered });
  return {
    async bind(tenantId, agentId, tasks) {
      const fresh = tasks.filter((t) => !known.has(key(tenantId, agentId, t.taskId)));
      if (fresh.length === 0) return;
      await query(
        `insert into a2a_tasks (tenant_id, agent_id, task_id, context_id)
           select ?, ?, t.task_id, t.context_id
             from json_to_recordset(?::json) as t(task_id text, context_id text)
         on conflict (agent_id, task_id) do nothing`,
        [tenantId, agentId, JSON.stringify(fresh.map((t) => ({ task_id: t.taskId, context_id: t.contextId })))],
      );
      for (const t of fresh) known.set(key(tenantId, agentId, t.taskId), true);
    },
    async allBound(tenantId, agentId, taskIds) {
      const unknown = [...new Set(taskIds)].filter((id) => !known.has(key(tenantId, agentId, id)));
      if (unknown.length === 0) return true;
      const rows = await query(
        `select task_id from a2a_tasks where tenant_id = ? and agent_id = ? and task_id in (select json_array_elements_text(?::json))`,
        [tenantId, agentId, JSON.stringify(unknown)],
      );
      for (const row of rows) known.set(key(tenantId, agentId, row.task_id as string), true);
      return rows.length === unknown.length;
    },
  };
}
