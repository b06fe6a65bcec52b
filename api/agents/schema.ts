// Validation of agent bodies (zod). Messages name the field, never internal state.
import { z } from 'zod';
import { isAllowedUpstream } from '../upstream/ssrf.ts';

export const PricingInput = z.strictObject({
  amount: z.string().regex(/^[0-9]{1,78}$/, 'pricing.amount must be a decimal integer string'),
  asset: z.literal('USDC', { error: 'pricing.asset must be USDC' }),
  network: z.literal('base', { error: 'pricing.network must be base' }),
  pay_to: z.string().regex(/^0x[0-9a-fA-F]{40}$/, 'pricing.pay_to must be a hex address'),
  tools: z.record(z.string().min(1), z.string().regex(/^[0-9]{1,78}$/, 'pricing.tools prices must be decimal integer strings')).optional(),
});

export const AgentCreateInput = z.strictObject({
  name: z.string().trim().min(1, 'name is required').max(200),
  description: z.string().max(4000).optional(),
  tags: z.array(z.string().min(1).max(100)).max(50).optional(),
  metadata: z.record(z.string(), z.unknown()).optional(),
  upstream_url: z.string().max(2048).optional(),
  credential_ref: z.string().optional(),
  emit_receipts: z.boolean().optional(),
  capture_body: z.boolean().optional(),
  protocol: z.enum(['http', 'mcp']).optional(),
  mcp_transport: z.literal('streamable_http').optional(),
  mcp_protocol_version: z.string().optional(),
  pricing: PricingInput.optional(),
  rate_limit_rps: z.number().positive().max(100_000).optional(),
  rate_limit_burst: z.number().int().positive().max(100_000).optional(),
  retry_non_idempotent: z.boolean().optional(),
});
export type AgentCreateInput = z.infer<typeof AgentCreateInput>;

/** First zod issue as a caller-safe message naming the field. */
export function describeIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  const field = issue.path.join('.');
  if (issue.code === 'unrecognized_keys') return `unknown field: ${issue.keys.join(', ')}`;
  if (issue.message && !issue.message.startsWith('Invalid')) return issue.message;
  return field ? `invalid ${field}` : 'invalid body';
}

/** Cross-field rules of SPEC "Create rules"; returns the first violation or undefined. */
export function crossFieldError(input: AgentCreateInput, allow: string[]): string | undefined {
  const protocol = input.protocol ?? 'http';
  if (protocol === 'mcp' && input.mcp_transport !== 'streamable_http') return 'mcp_transport must be streamable_http when protocol is mcp';
  if (protocol === 'http' && input.mcp_transport !== undefined) return 'mcp_transport is only valid when protocol is mcp';
  if (protocol === 'http' && input.pricing?.tools) return 'pricing.tools requires protocol mcp';
  if (input.upstream_url !== undefined && !isAllowedUpstream(input.upstream_url, allow)) return 'invalid upstream_url';
  return undefined;
}
