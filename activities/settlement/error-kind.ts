// What may be said of a settlement error outside the facilitator's records: its kind only.
// The RPC client quotes the request it failed on in its messages (ethers puts the JSON-RPC
// payload there: calldata carrying the payment signature, or the signed transaction), and a
// database error may quote a value, so neither a message nor a cause leaves as such: not to
// a workflow history, a log line or a span.

/** The error's type and, when it has one, its code (`Error: NETWORK_ERROR`, `error: 23505`). */
export function errorKind(err: unknown, type: string = (err as Error)?.name || 'Error'): string {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' ? `${type}: ${code}` : type;
}
