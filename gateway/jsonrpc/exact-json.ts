// JSON parsed so that serializing it again writes every number as the sender wrote it (no
// rounding past 2^53, `1.0` stays `1.0`): a request or response the gateway changes one key of
// (a payment taken out, a receipt put in) says everything else exactly as it was sent.

type Reviver = (this: unknown, key: string, value: unknown) => unknown;
/** JSON.rawJSON and the reviver's source text (Node 21+; not yet in TypeScript's lib). */
const rawJson = (JSON as unknown as { rawJSON(text: string): unknown }).rawJSON;

function keepNumberText(_key: string, value: unknown, context?: { source?: string }): unknown {
  return typeof value === 'number' && context?.source !== undefined ? rawJson(context.source) : value;
}

/** JSON.parse whose numbers JSON.stringify writes back as they were written (throws as JSON.parse does). */
export function parseKeepingNumbers(text: string): unknown {
  return JSON.parse(text, keepNumberText as Reviver) as unknown;
}
