// GET /v1/invocations and the receipt endpoint: their query, path and answers (zod). The
// OpenAPI document is generated from these; the route parses its query with them.
import { z } from 'zod';
import { PageQuery } from '../pagination.ts';
import { idField, idParam, instantParam, maxChars, NO_NUL } from '../validation.ts';
import { InvocationView } from '../proxy/schema.ts';

export const InvocationListQuery = z.object({
  agent_id: idField('agt', 'invalid agent_id').optional().meta({ description: 'Only calls of this agent.' }),
  task_id: maxChars(
    z.string({ error: 'task_id may be given once' }).min(1, 'task_id must not be empty'),
    256,
    'task_id is too long',
  )
    .regex(NO_NUL, 'task_id must not contain NUL characters')
    .optional()
    .meta({ description: "Only the calls of this A2A task (an A2A agent's invocations carry a2a_task_id)." }),
  budget_id: idField('bud', 'invalid budget_id')
    .optional()
    .meta({ description: 'Only the calls this budget refused (429 `budget exceeded`).' }),
  caller: maxChars(
    z.string({ error: 'caller may be given once' }).min(1, 'caller must not be empty'),
    256,
    'caller is too long',
  )
    .regex(NO_NUL, 'caller must not contain NUL characters')
    .optional()
    .meta({
      description:
        "Only the calls of this caller: a token's user (its user claim), or `x402:<address>` for a public agent's payer (the address in any letter case).",
    }),
  status: z
    .enum(['pending', 'running', 'succeeded', 'failed'], {
      error: 'status must be pending, running, succeeded or failed',
    })
    .optional(),
  since: instantParam('since', 'Invocations created at or after this RFC 3339 instant.').optional(),
  until: instantParam('until', 'Invocations created at or before this RFC 3339 instant; not before since.').optional(),
  ...PageQuery,
});

export const InvocationList = z
  .strictObject({ data: z.array(InvocationView), next_cursor: z.string().nullable() })
  .meta({ id: 'InvocationList' });

export const ReceiptPath = z.object({ inv_id: idParam('inv', 'Invocation') });

export const Receipt = z
  .strictObject({
    invocation_id: z.string(),
    agent_id: z.string(),
    kid: z.string(),
    alg: z.literal('EdDSA'),
    format: z.literal('jws-compact'),
    receipt: z.string(),
    created_at: z.iso.datetime({ offset: true }),
  })
  .meta({ id: 'Receipt' });
