// What may be said of an error outside the records that own it: its kind and where it was
// thrown, never its message. The RPC client quotes the request it failed on in its messages
// (ethers puts the JSON-RPC payload there: calldata carrying the payment signature, or the
// signed transaction), and a database error may quote a value it refused (a caller's header,
// a model name), so neither a message nor a cause leaves as such: not to a workflow history,
// a log line or a span.

/** The error's type and, when it has one, its code (`Error: NETWORK_ERROR`, `error: 23505`). */
export function errorKind(err: unknown, type: string = (err as Error)?.name || 'Error'): string {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' ? `${type}: ${code}` : type;
}

/**
 * The stack's frames without its heading: V8 begins a stack with the message (which may span
 * several lines), the frames are the lines from the first `at` on. Where the error was thrown,
 * for finding the bug, with no value in it.
 */
export function errorFrames(err: unknown, depth = 8): string[] {
  const stack = (err as Error)?.stack;
  if (typeof stack !== 'string') return [];
  const lines = stack.split('\n');
  const first = lines.findIndex((line) => /^\s+at /.test(line));
  return first < 0 ? [] : lines.slice(first, first + depth).map((line) => line.trim());
}
