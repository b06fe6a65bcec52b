// JSON-RPC responses the gateway writes itself (a payment transport's answer) or reads in an
// upstream's answer (the one response a receipt goes into).

type Obj = Record<string, unknown>;

/** A JSON-RPC response with this result (a notification's, without an id, answers id null). */
export const rpcResult = (id: string | number | null | undefined, result: Obj): Obj => ({
  jsonrpc: '2.0',
  id: id ?? null,
  result,
});

/** Whether the text is the JSON-RPC response to request `rpcId` with an object `result`. */
export function isResultFor(text: string, rpcId: string | number): boolean {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return false;
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return false;
  const response = parsed as { id?: unknown; result?: unknown };
  if (response.id !== rpcId) return false;
  return !!response.result && typeof response.result === 'object' && !Array.isArray(response.result);
}
