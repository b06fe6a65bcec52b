// The JSON-RPC methods of A2A the gateway knows, in both spellings clients send: the A2A 1.0
// names (`SendMessage`, as @a2a-js/sdk 1.x sends them) and the 0.3 names (`message/send`, as
// 0.3 clients and the SDK's 0.3 compatibility client send them). Both spellings are one method:
// prices, policy and records use the 1.0 name. For each: whether it answers as a stream of
// Server-Sent Events, and where its request names a task (what task binding checks).
//
// Not here, so unknown to the gateway (refused unless the agent passes unknown methods):
// `ListTasks`, whose answer lists the upstream's tasks whoever created them and so cannot be
// kept to one tenant's, and `GetExtendedAgentCard`, whose answer is the upstream's own card,
// its addresses included.
import { JsonRpcRequestError } from '../jsonrpc/request.ts';

/** Where a request's params name the task it is about. */
type TaskAt = 'id' | 'taskId' | 'message';

type MethodSpec = {
  /** The A2A 1.0 name: the one the gateway records, prices and matches. */
  name: string;
  /** The A2A 0.3 name. */
  legacy: string;
  streaming: boolean;
  /** Where a 1.0 request names its task; `legacyTaskAt` when 0.3 puts it elsewhere. */
  taskAt: TaskAt;
  legacyTaskAt?: TaskAt;
};

const METHODS: readonly MethodSpec[] = [
  { name: 'SendMessage', legacy: 'message/send', streaming: false, taskAt: 'message' },
  { name: 'SendStreamingMessage', legacy: 'message/stream', streaming: true, taskAt: 'message' },
  { name: 'GetTask', legacy: 'tasks/get', streaming: false, taskAt: 'id' },
  { name: 'CancelTask', legacy: 'tasks/cancel', streaming: false, taskAt: 'id' },
  { name: 'SubscribeToTask', legacy: 'tasks/resubscribe', streaming: true, taskAt: 'id' },
  {
    name: 'CreateTaskPushNotificationConfig',
    legacy: 'tasks/pushNotificationConfig/set',
    streaming: false,
    taskAt: 'taskId',
  },
  {
    name: 'GetTaskPushNotificationConfig',
    legacy: 'tasks/pushNotificationConfig/get',
    streaming: false,
    taskAt: 'taskId',
    legacyTaskAt: 'id',
  },
  {
    name: 'ListTaskPushNotificationConfigs',
    legacy: 'tasks/pushNotificationConfig/list',
    streaming: false,
    taskAt: 'taskId',
    legacyTaskAt: 'id',
  },
  {
    name: 'DeleteTaskPushNotificationConfig',
    legacy: 'tasks/pushNotificationConfig/delete',
    streaming: false,
    taskAt: 'taskId',
    legacyTaskAt: 'id',
  },
];

const BY_SPELLING = new Map<string, { spec: MethodSpec; taskAt: TaskAt }>([
  ...METHODS.map((spec) => [spec.name, { spec, taskAt: spec.taskAt }] as const),
  ...METHODS.map((spec) => [spec.legacy, { spec, taskAt: spec.legacyTaskAt ?? spec.taskAt }] as const),
]);

/** Every name the gateway knows, in the 1.0 spelling. */
export const A2A_METHODS: readonly string[] = METHODS.map((m) => m.name);

/** The 1.0 name of a method given in either spelling; null when the gateway does not know it. */
export function canonicalA2aMethod(method: string): string | null {
  return BY_SPELLING.get(method)?.spec.name ?? null;
}

/** The longest id, skill or method name the gateway records or binds (longer ones are refused). */
const MAX_A2A_ID = 256;

/** What one A2A request says about itself: what the gateway prices, matches, binds and records. */
export type A2aRequestFacts = {
  /** The 1.0 name; null for a method the gateway does not know. */
  method: string | null;
  /** The method as the caller spelled it. */
  sent: string;
  /** Answered as Server-Sent Events. */
  streaming: boolean;
  /** The skill the message names in its metadata (`metadata.skill`), for prices and policy. */
  skill: string | null;
  /** The tasks the request is about: each must have been seen through the same agent. */
  taskIds: string[];
  /** The context the message names, recorded. */
  contextId: string | null;
};

/** A facts problem: a request the gateway does not pass (a caller-safe message, as every JsonRpcRequestError). */
export class A2aRequestError extends JsonRpcRequestError {}

type Obj = Record<string, unknown>;
const objectOr = (value: unknown): Obj | null =>
  value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Obj) : null;

function idField(where: Obj | null, key: string, what: string): string | null {
  const value = where?.[key];
  if (value === undefined || value === null || value === '') return null;
  if (typeof value !== 'string' || value.length > MAX_A2A_ID || value.includes('\u0000'))
    throw new A2aRequestError(`A2A ${what} must be a string of at most ${MAX_A2A_ID} characters`);
  return value;
}

/**
 * A field's name in the protobuf's own spelling: A2A 1.0 is defined in protobuf, whose JSON
 * readers (the @a2a-js/sdk server's included) take `task_id` as well as `taskId`. A task named
 * under either is a task the request is about.
 */
const protoName = (key: string) => key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

/** The ids a field names under its JSON and its protobuf spelling (each checked as idField). */
function idsOf(where: Obj | null, key: string, what: string): string[] {
  const names = key === protoName(key) ? [key] : [key, protoName(key)];
  return names.flatMap((name) => idField(where, name, what) ?? []);
}

/** The facts of one JSON-RPC request (`method` and `params` as parsed). */
export function a2aRequestFacts(method: string, params: unknown): A2aRequestFacts {
  const known = BY_SPELLING.get(method);
  const p = objectOr(params);
  const message = objectOr(p?.message);
  // Only a method that sends a message names a skill: a `message` added to GetTask or
  // SubscribeToTask would otherwise price or match the call by a skill it does not run.
  const metadata = known && known.taskAt !== 'message' ? null : objectOr(message?.metadata);
  const facts: A2aRequestFacts = {
    method: known?.spec.name ?? null,
    sent: method,
    streaming: known?.spec.streaming ?? false,
    skill: idField(metadata, 'skill', 'message metadata.skill'),
    taskIds: [],
    contextId: idsOf(message, 'contextId', 'message contextId')[0] ?? null,
  };
  if (!known) return facts;
  if (known.taskAt === 'message') {
    facts.taskIds.push(...idsOf(message, 'taskId', 'message taskId'));
    for (const key of ['referenceTaskIds', 'reference_task_ids']) {
      const refs = message?.[key];
      if (!Array.isArray(refs)) continue;
      if (refs.length > 100) throw new A2aRequestError('A2A message names too many referenceTaskIds');
      for (const ref of refs) {
        const id = idField({ ref }, 'ref', 'message referenceTaskIds');
        if (id) facts.taskIds.push(id);
      }
    }
  } else {
    const ids = idsOf(p, known.taskAt, `params.${known.taskAt}`);
    if (ids.length === 0) throw new A2aRequestError(`A2A ${method} needs params.${known.taskAt}`);
    facts.taskIds.push(...ids);
  }
  return facts;
}

/** A task the upstream named in an answer, and its context. */
export type TaskSeen = { taskId: string; contextId: string | null };

const asId = (value: unknown): string | null =>
  typeof value === 'string' && value !== '' && value.length <= MAX_A2A_ID && !value.includes('\u0000') ? value : null;

/**
 * The task a JSON-RPC result is about, in the 1.0 shapes (`{task}`, `{message}`,
 * `{statusUpdate}`, `{artifactUpdate}`, a bare Task) and the 0.3 ones (`kind` task, message,
 * status-update, artifact-update); null when it names none (a message outside any task).
 */
export function taskOfResult(result: unknown): TaskSeen | null {
  const r = objectOr(result);
  if (!r) return null;
  const wrapped = objectOr(r.task) ?? objectOr(r.message) ?? objectOr(r.statusUpdate) ?? objectOr(r.artifactUpdate);
  if (wrapped && r.kind === undefined) return taskOfResult(wrapped);
  const isTask = r.kind === 'task' || (r.kind === undefined && r.status !== undefined && r.taskId === undefined);
  const taskId = asId(isTask ? r.id : r.taskId);
  return taskId ? { taskId, contextId: asId(r.contextId) } : null;
}
