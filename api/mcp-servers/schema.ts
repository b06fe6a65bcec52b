// Virtual MCP server request and response bodies (zod); the OpenAPI document is generated from
// these. The rules that need the tenant's agents (each member an MCP agent of the tenant, the
// prefixes unique) are the domain's (gateway/mcp-servers/management.ts).
import { z } from 'zod';
import { PageQuery } from '../pagination.ts';
import { idField, idParam, maxChars, nameField, NO_NUL } from '../validation.ts';
import { PREFIX_PATTERN } from '../../gateway/mcp-servers/names.ts';

const MAX_MEMBERS = 50;

const Description = maxChars(
  z.string({ error: 'description must be a string' }).regex(NO_NUL, 'description must not contain NUL characters'),
  2000,
  'description is too long',
);

const Member = z.strictObject({
  agent_id: idField('agt', 'members[].agent_id must be an agent id (agt_<uuidv7>)').meta({
    description: 'An MCP agent (protocol=mcp) of the tenant.',
  }),
  prefix: z
    .string({ error: 'members[].prefix must be a string' })
    .regex(
      PREFIX_PATTERN,
      'members[].prefix must be 1 to 48 letters, digits, _, . or -, starting with a letter or digit',
    )
    .optional()
    .meta({
      description:
        "Its tools are named `{prefix}_{tool}`. Default: the agent's name in lower case, every run of other characters one `_`. Unique within the server.",
    }),
  tools: z
    .array(
      z
        .string({ error: 'members[].tools entries must be strings' })
        .min(1, 'members[].tools entries must not be empty')
        .max(256, 'members[].tools entries are too long')
        // eslint-disable-next-line no-control-regex -- U+0000 is excluded on purpose
        .regex(/^[^*\u0000]*\*?$/, 'members[].tools entries allow one trailing * only'),
      { error: 'members[].tools must be an array of tool names' },
    )
    .max(1000, 'members[].tools has too many entries')
    .optional()
    .meta({
      description:
        "The member's tools the server shows, by the member's own names (one trailing `*` allowed, as in policy). Absent: every tool.",
    }),
});

const Members = z
  .array(Member, { error: 'members must be an array' })
  .min(1, 'members must not be empty')
  .max(MAX_MEMBERS, `members may hold at most ${MAX_MEMBERS} agents`);

export const McpServerCreateInput = z
  .strictObject({
    name: nameField('name must not be empty'),
    description: Description.nullable().optional(),
    members: Members,
  })
  .meta({
    id: 'McpServerCreate',
    description:
      'A virtual MCP server: one MCP endpoint (`mcp_url`) that federates the tools, prompts and resources of its member MCP agents.',
  });
export type McpServerCreateInput = z.infer<typeof McpServerCreateInput>;

export const McpServerUpdateInput = z
  .strictObject({
    name: nameField('name must not be empty').optional(),
    description: Description.nullable().optional(),
    members: Members.optional().meta({ description: 'Replaces the whole list.' }),
  })
  .meta({ id: 'McpServerUpdate', description: 'Every key is optional; an absent key leaves its value unchanged.' });
export type McpServerUpdateInput = z.infer<typeof McpServerUpdateInput>;

export const McpServerView = z
  .strictObject({
    id: z.string().regex(/^mcps_/),
    tenant_id: z.string(),
    name: z.string(),
    description: z.string().nullable(),
    members: z.array(
      z.strictObject({ agent_id: z.string(), prefix: z.string(), tools: z.array(z.string()).nullable() }),
    ),
    mcp_url: z.url().meta({
      description: 'The absolute URL an MCP client connects to (streamable HTTP, with the bearer token).',
    }),
    created_at: z.iso.datetime({ offset: true }),
    updated_at: z.iso.datetime({ offset: true }),
  })
  .meta({ id: 'McpServer' });

export const McpServerList = z
  .strictObject({ data: z.array(McpServerView), next_cursor: z.string().nullable() })
  .meta({ id: 'McpServerList' });

export const McpServerListQuery = z.object(PageQuery);

export const McpServerPath = z.object({ id: idParam('mcps', 'MCP server') });

/** A request to a server's MCP endpoint: one JSON-RPC 2.0 request or notification (MCP's streamable HTTP). */
export const McpServerRpcInput = z
  .looseObject({
    jsonrpc: z.literal('2.0'),
    method: z.string(),
    id: z.union([z.string(), z.int()]).optional(),
    params: z.record(z.string(), z.unknown()).optional(),
  })
  .meta({ id: 'McpServerRpc', description: 'One JSON-RPC 2.0 request or notification of MCP.' });

/** The session header of every request after initialize. */
export const McpSessionHeader = z.object({
  'mcp-session-id': z.string().optional().meta({ description: "The session initialize's answer named." }),
});

/** A session's stream is opened only within its session: the header is required (400 without it). */
export const McpStreamSessionHeader = z.object({
  'mcp-session-id': z
    .string()
    .regex(/^[\x21-\x7e]+$/)
    .meta({ description: "The session initialize's answer named." }),
});
