// The policy document (docs/API.md "Policy"), validated strictly: a malformed document is
// a 400 and never reaches the store. Unknown keys anywhere are malformed, so a typo such as
// `max_body_byte` cannot silently turn a rule into a catch-all.
import { z } from 'zod';

export const POLICY_ACTIONS = ['allow', 'warn', 'deny'] as const;
export type PolicyAction = (typeof POLICY_ACTIONS)[number];

const Action = z.enum(POLICY_ACTIONS, { error: 'action must be allow, warn or deny' });

/** A tool pattern: a name, optionally ending in one `*` (prefix match); `*` elsewhere is malformed. */
const ToolPattern = z
  .string()
  .min(1, 'tool patterns must be non-empty')
  .max(256)
  // A pattern, not a refinement, so the API document states it; no U+0000 (refused in every body).
  // eslint-disable-next-line no-control-regex -- U+0000 is excluded on purpose
  .regex(/^[^*\u0000]*\*?$/, 'a tool pattern allows one trailing * only');

const Count = (field: string) =>
  z
    .number({ error: `${field} must be a non-negative integer` })
    .int(`${field} must be a non-negative integer`)
    .min(0, `${field} must be a non-negative integer`)
    .max(Number.MAX_SAFE_INTEGER, `${field} is too large`);

export const PolicyMatch = z.strictObject({
  agents: z.array(z.string().min(1).max(256)).max(1000).optional(),
  // token: a /v1 bearer token's caller; x402: a public agent's payer (no token).
  callers: z
    .array(z.enum(['token', 'x402'], { error: 'callers entries must be token or x402' }))
    .max(2)
    .optional(),
  tools: z.array(ToolPattern).max(1000).optional(),
  // A JSON-RPC method (A2A in either spelling, or MCP) and an A2A message's skill; patterns as for tools.
  methods: z.array(ToolPattern).max(1000).optional(),
  skills: z.array(ToolPattern).max(1000).optional(),
  max_body_bytes: Count('max_body_bytes').optional(),
  rate_per_min: Count('rate_per_min').optional(),
});
export type PolicyMatch = z.infer<typeof PolicyMatch>;

export const PolicyRule = z.strictObject({
  action: Action,
  // An absent match is the empty match: every field absent, so it matches every call.
  match: PolicyMatch.optional(),
});
export type PolicyRule = z.infer<typeof PolicyRule>;

export const PolicyDocument = z.strictObject({
  default: Action,
  on_error: Action,
  // Wholesale replace: an absent list is stored as the empty list it means.
  rules: z.array(PolicyRule).max(1000).default([]),
});
export type PolicyDocument = z.infer<typeof PolicyDocument>;

/** First zod issue as a caller-safe message naming the field. */
export function describePolicyIssue(error: z.ZodError, input: unknown): string {
  const issue = error.issues[0];
  const field = issue.path.join('.');
  const given = typeof input === 'object' && input !== null ? (input as Record<string, unknown>) : {};
  if (issue.code === 'unrecognized_keys')
    return `unknown field${field ? ` in ${field}` : ''}: ${issue.keys.join(', ')}`;
  if ((field === 'default' || field === 'on_error') && given[field] === undefined) return `${field} is required`;
  if (issue.message && !issue.message.startsWith('Invalid'))
    return field ? `${field}: ${issue.message}` : issue.message;
  return field ? `invalid ${field}` : 'invalid policy document';
}
