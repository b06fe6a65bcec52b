// What a payment scheme is to the protocol layer: a name and the payload it signs. The envelope
// (x402/schemas.ts, x402/v2.ts) is every scheme's; each scheme parses its own `payload`.

export type SchemeProtocol = {
  /** The scheme's name on the wire (`scheme` of requirements and payments). */
  readonly name: string;
  /** The scheme's payload parsed from an envelope's (unknown keys dropped); null when it is not one. */
  parsePayload(payload: unknown): Record<string, unknown> | null;
  /** The payer a payload names, as sent; '' when it is not one of this scheme's. */
  payerOf(payload: Record<string, unknown>): string;
};

/**
 * A scheme whose payload is one zod schema: parsed with it (unknown keys dropped), its payer read
 * from the parsed payload. `parse` is typed; a payload it returned already is taken as it is (a
 * paid call's payload is parsed as it is decoded and asked for again as it is verified).
 */
export function schemaProtocol<T extends Record<string, unknown>>(
  name: string,
  schema: { safeParse(value: unknown): { success: true; data: T } | { success: false } },
  payer: (payload: T) => string,
): SchemeProtocol & { parse(payload: unknown): T | null } {
  const outputs = new WeakSet<object>();
  const parse = (payload: unknown): T | null => {
    if (typeof payload === 'object' && payload !== null && outputs.has(payload)) return payload as T;
    const parsed = schema.safeParse(payload);
    if (!parsed.success) return null;
    outputs.add(parsed.data);
    return parsed.data;
  };
  return { name, parse, parsePayload: parse, payerOf: (payload) => ((p) => (p ? payer(p) : ''))(parse(payload)) };
}
