// Watches an A2A agent's answer as it passes to the caller, without changing a byte, for the
// tasks it names (gateway/a2a/methods.ts taskOfResult), and binds each to the agent before the
// caller can have read it (gateway/a2a/tasks.ts): a caller told of a task can ask about it at
// once, on any replica.
// - Server-Sent Events: each event is passed as soon as it is whole; an event naming a task not
//   yet bound waits for that one insert. Only the event still arriving is held (at most 1 MiB,
//   beyond which the rest passes unwatched).
// - JSON: chunks pass as they come, each held until the next arrives, so the last one leaves
//   only once the answer's task is bound (the whole answer is watched up to 1 MiB).
// A failed binding is logged; the answer still passes (the caller paid for it), and a later
// call about that task is refused as unbound.
import { Transform, type Readable } from 'node:stream';
import type { IncomingHttpHeaders } from 'node:http';
import type { Logger } from 'pino';
import { taskOfResult } from '../../gateway/a2a/methods.ts';
import { taskCaller, type TaskBindings } from '../../gateway/a2a/tasks.ts';
import { errorKind } from '../../lib/error-kind.ts';
import type { ProxyCall } from './call.ts';

const MAX_WATCHED = 1024 * 1024;

function resultOf(text: string): unknown {
  try {
    return (JSON.parse(text) as { result?: unknown } | null)?.result;
  } catch {
    return undefined;
  }
}

/** The data of one SSE event (its `data:` lines joined), or null when it has none. */
function eventData(event: string): string | null {
  const lines = event.split(/\r\n|\r|\n/).filter((l) => l.startsWith('data:'));
  return lines.length ? lines.map((l) => l.slice(5).replace(/^ /, '')).join('\n') : null;
}

/**
 * A blank line: two line ends in a row, each CRLF, LF or CR (the SSE specification takes all
 * three). A CR last in the bytes so far counts as a line end of its own: an LF after it then
 * starts the next event with an empty line, which carries nothing.
 */
const BLANK_LINE = /(?:\r\n|\n|\r(?!\n))(?:\r\n|\n|\r(?!\n))/;

/** The end of the first whole event in `bytes` after `from` (past its blank line), or -1. */
function eventEnd(bytes: Buffer, from: number): number {
  // latin1: one character per byte, so the match's index is the byte offset.
  const found = BLANK_LINE.exec(bytes.toString('latin1', from));
  return found ? from + found.index + found[0].length : -1;
}

export function a2aAnswerTap(
  call: ProxyCall,
  headers: IncomingHttpHeaders,
  bindings: TaskBindings,
  log: Pick<Logger, 'error'>,
): ((source: Readable) => Readable) | null {
  const a2a = call.a2a;
  if (!a2a || headers['content-encoding']) return null;
  const bound = new Set<string>();
  const see = async (result: unknown) => {
    const task = taskOfResult(result);
    if (!task) return;
    a2a.answered ??= task;
    if (bound.has(task.taskId)) return;
    bound.add(task.taskId);
    await bindings
      .bind(call.caller.tenantId, call.agent.id, taskCaller(call.caller), [task])
      .catch((err: unknown) =>
        log.error({ invocationId: call.invocationId, err: errorKind(err) }, 'could not bind an A2A task'),
      );
  };
  const eventStream = /^text\/event-stream/i.test(String(headers['content-type'] ?? ''));
  return (source) => source.pipe(eventStream ? sseTap(see) : jsonTap(see));
}

function sseTap(see: (result: unknown) => Promise<void>): Transform {
  // Bytes, not text: the answer passes exactly as sent, whatever its encoding.
  let pending: Buffer = Buffer.alloc(0);
  let watching = true;
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      if (!watching) return done(null, chunk);
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      void (async () => {
        let start = 0;
        for (let end = eventEnd(pending, start); end !== -1; start = end, end = eventEnd(pending, start)) {
          const data = eventData(pending.subarray(start, end).toString('utf8'));
          if (data?.startsWith('{')) await see(resultOf(data));
        }
        const whole = pending.subarray(0, start);
        pending = pending.subarray(start);
        if (pending.length > MAX_WATCHED) {
          watching = false;
          const all = Buffer.concat([whole, pending]);
          pending = Buffer.alloc(0);
          return done(null, all);
        }
        done(null, whole.length ? whole : undefined);
      })();
    },
    flush(done) {
      done(null, pending.length ? pending : undefined);
    },
  });
}

function jsonTap(see: (result: unknown) => Promise<void>): Transform {
  const chunks: Buffer[] = [];
  let size = 0;
  let held: Buffer | null = null;
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      size += chunk.length;
      if (size <= MAX_WATCHED) chunks.push(chunk);
      const previous = held;
      held = chunk;
      done(null, previous ?? undefined);
    },
    flush(done) {
      const last = held;
      const finish = () => done(null, last ?? undefined);
      if (size > MAX_WATCHED) return finish();
      void see(resultOf(Buffer.concat(chunks).toString('utf8'))).then(finish, finish);
    },
  });
}

/** What the call's completion records of its task: the request's, else the answer's first. */
export function a2aAnswered(call: ProxyCall): { a2aTaskId?: string | null; a2aContextId?: string | null } {
  const a2a = call.a2a;
  if (!a2a) return {};
  return {
    a2aTaskId: a2a.taskIds[0] ?? a2a.answered?.taskId ?? null,
    a2aContextId: a2a.contextId ?? a2a.answered?.contextId ?? null,
  };
}
