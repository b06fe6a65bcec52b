// How deep a parsed JSON value nests, measured without recursion: the checks that follow a
// parse (zod schemas, canonical forms, policy matching) walk values recursively, so a body
// nested 100 000 levels deep would overflow their stacks. Bodies deeper than the limit are
// refused with 400 before anything else reads them (a JSON-RPC request's limit:
// gateway/jsonrpc/request.ts).

/** Management bodies (agents, credentials, policy, settlement): far deeper than any valid one. */
export const MAX_BODY_DEPTH = 32;

export function nestsDeeperThan(value: unknown, max: number): boolean {
  const stack: Array<[unknown, number]> = [[value, 0]];
  while (stack.length > 0) {
    const [node, depth] = stack.pop()!;
    if (node === null || typeof node !== 'object') continue;
    if (depth + 1 > max) return true;
    for (const child of Array.isArray(node) ? node : Object.values(node)) {
      if (child !== null && typeof child === 'object') stack.push([child, depth + 1]);
    }
  }
  return false;
}
