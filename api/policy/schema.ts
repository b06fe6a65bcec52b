// /v1/policy: the decisions query and the answers (zod). The request document is the policy
// module's own schema (gateway/policy/schema.ts). The OpenAPI document is generated from these.
import { z } from 'zod';
import { POLICY_ACTIONS, PolicyDocument, PolicyRule } from '../../gateway/policy/schema.ts';
import { instantParam } from '../validation.ts';

const at = z.iso.datetime({ offset: true });

/** `limit` is clamped, never refused (SPEC "Limits"): any value, repeated or not, is read. */
export const DecisionsQuery = z.object({
  limit: z
    .union([z.string(), z.array(z.string())])
    .optional()
    .meta({
      description:
        'Page size, an integer clamped to [1, 100]; default 20, also for a value that is not a number. Never refused.',
    }),
  since: instantParam('since', 'Decisions made at or after this RFC 3339 instant.').optional(),
  until: instantParam('until', 'Decisions made at or before this RFC 3339 instant; not before since.').optional(),
});

export const PolicyDocumentInput = PolicyDocument.meta({
  id: 'PolicyDocument',
  description: 'Wholesale replace: default, on_error and rules are set exactly as given.',
});
export const PolicyVersion = z.strictObject({ version: z.int(), updated_at: at }).meta({ id: 'PolicyVersion' });
export const PolicyView = z
  .strictObject({
    default: z.enum(POLICY_ACTIONS),
    on_error: z.enum(POLICY_ACTIONS),
    rules: z.array(PolicyRule),
    version: z.int(),
    updated_at: at,
  })
  .meta({ id: 'Policy' });
const PolicyDecision = z
  .strictObject({
    id: z.string().regex(/^pdec_/),
    agent_id: z.string(),
    protocol: z.string(),
    mcp_tool: z.string().nullable(),
    action: z.enum(POLICY_ACTIONS),
    matched_rule: z
      .string()
      .meta({ description: '1-based rule position; empty when the action came from default or on_error.' }),
    reason: z.string(),
    invocation_id: z.string().regex(/^inv_/).nullable().meta({
      description:
        'The id of the invocation the call was given (an addition to the v1 contract); null for a deny, which never becomes one. A call refused after the policy stage (402, 503) has no invocation record under it.',
    }),
    created_at: at,
  })
  .meta({ id: 'PolicyDecision' });
export const PolicyDecisionList = z
  .strictObject({ data: z.array(PolicyDecision), limit: z.int() })
  .meta({ id: 'PolicyDecisionList' });
