// The names a virtual MCP server shows: a member's tools are `{prefix}_{tool}`. A prefix is a
// valid start of an MCP tool name (letters, digits, `_`, `.`, `-`), so the joined name is one
// too when the member's own is. Which member a name belongs to is decided by the longest prefix
// it starts with, both when listing and when calling, so a name two members could produce
// (prefix `a` with tool `b_c`, prefix `a_b` with tool `c`) always means the same member.
export const PREFIX_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,47}$/;

/** The agent's name made a prefix: lower case, every run of other characters one `_`. */
export function defaultPrefix(agentName: string): string {
  const made = agentName
    .toLowerCase()
    .replace(/[^a-z0-9.-]+/g, '_')
    .replace(/^[_.-]+|_+$/g, '')
    .slice(0, 48)
    .replace(/_+$/, '');
  return made === '' ? 'agent' : made;
}

/** Whether `tool` passes the member's allow-list (null: every tool; one trailing `*` as in policy). */
export function allowedByList(tools: string[] | null, tool: string): boolean {
  if (tools === null) return true;
  return tools.some((pattern) => (pattern.endsWith('*') ? tool.startsWith(pattern.slice(0, -1)) : tool === pattern));
}

/** The member a prefixed name belongs to (the longest matching prefix) and the member's own name. */
export function routeName<M extends { prefix: string }>(
  members: readonly M[],
  name: string,
): { member: M; name: string } | null {
  let best: M | null = null;
  for (const member of members)
    if (name.startsWith(`${member.prefix}_`) && (!best || member.prefix.length > best.prefix.length)) best = member;
  if (!best) return null;
  const own = name.slice(best.prefix.length + 1);
  return own === '' ? null : { member: best, name: own };
}
