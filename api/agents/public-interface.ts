// `public_interface`: what a caller needs to know to call a public agent, as its tenant describes
// it (docs/API.md "Selling an agent to any x402 client", "Describing the agent"). It is shown to
// anyone, in the discovery catalog and in v2 challenges (the bazaar extension), so it is bounded
// (16 KiB serialized, 16 levels deep), its schemas must be JSON Schema (draft 2020-12, checked
// against the meta-schema, never compiled: a tenant's schema is never run here), and a value
// that looks like a credential is refused.
import { z } from 'zod';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { Ajv as AjvDraft07 } from 'ajv';
import { nestsDeeperThan } from '../../lib/json-depth.ts';
import { maxChars } from '../validation.ts';

const PUBLIC_INTERFACE_MAX_BYTES = 16_384;
const PUBLIC_INTERFACE_MAX_DEPTH = 16;
const MAX_TOOLS = 100;

// Meta-schema checks only (validateSchema): no code is generated from a tenant's schema. A
// schema without $schema is draft 2020-12 (MCP's default too); one naming draft-07 (what MCP
// servers built on zod-to-json-schema list) is checked against draft-07; any other $schema is
// refused (it could not be checked).
const ajv = new Ajv2020({ strict: false, validateFormats: false });
const ajvDraft07 = new AjvDraft07({ strict: false, validateFormats: false });
const DRAFT_07 = /^https?:\/\/json-schema\.org\/draft-07\/schema#?$/;
const DRAFT_2020 = /^https?:\/\/json-schema\.org\/draft\/2020-12\/schema#?$/;

/** Looks like a secret: a bearer token, a JWT, a PEM private key, or a well-known API key prefix. */
const CREDENTIAL_SHAPES = [
  /\bbearer\s+[A-Za-z0-9._~+/-]{16,}/i,
  /\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\./,
  /-----BEGIN [A-Z ]*PRIVATE KEY-----/,
  /\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{8,}/,
  /\bsk-[A-Za-z0-9_-]{20,}/,
  /\b(?:ghp|gho|ghs|github_pat)_[A-Za-z0-9_]{20,}/,
  /\bxox[abpr]-[A-Za-z0-9-]{10,}/,
  /\bAKIA[0-9A-Z]{16}\b/,
];

/** The first string (key or value) in `value` shaped like a credential, if any. */
function credentialLike(value: unknown): boolean {
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const node = stack.pop();
    if (typeof node === 'string') {
      if (CREDENTIAL_SHAPES.some((shape) => shape.test(node))) return true;
    } else if (node !== null && typeof node === 'object') {
      for (const [key, child] of Object.entries(node)) stack.push(key, child);
    }
  }
  return false;
}

function isJsonSchema(schema: Record<string, unknown>): boolean {
  const { $schema } = schema;
  if ($schema === undefined || (typeof $schema === 'string' && DRAFT_2020.test($schema)))
    return ajv.validateSchema({ ...schema, $schema: undefined }) === true;
  if (typeof $schema === 'string' && DRAFT_07.test($schema))
    return ajvDraft07.validateSchema({ ...schema, $schema: undefined }) === true;
  return false;
}

const JsonObject = z.record(z.string(), z.json(), { error: 'must be a JSON object' });

const InputSchema = (what: string) =>
  JsonObject.refine(
    isJsonSchema,
    `${what} must be a JSON Schema (draft 2020-12, or draft-07 when its $schema says so)`,
  ).meta({
    description:
      'A JSON Schema (draft 2020-12, or draft-07 when its $schema names it; no other $schema), checked against the meta-schema.',
  });

const ToolInterface = z.strictObject({
  description: maxChars(z.string({ error: 'tool description must be a string' }), 1000, 'tool description is too long')
    .optional()
    .meta({ description: "What the tool does; default: the agent's public_description." }),
  input_schema: InputSchema('public_interface.tools input_schema')
    .optional()
    .meta({ description: "JSON Schema of the tool's arguments; default: read from the agent's tools/list." }),
  example: JsonObject.optional().meta({ description: 'Example arguments.' }),
});

export const PublicInterfaceInput = z
  .strictObject({
    input_schema: InputSchema('public_interface.input_schema')
      .optional()
      .meta({ description: 'JSON Schema of the request body (http agents).' }),
    input_example: JsonObject.optional().meta({ description: 'An example request body (a JSON object).' }),
    output_example: JsonObject.optional().meta({ description: 'An example of the answer (a JSON object).' }),
    tools: z
      .record(maxChars(z.string().min(1), 200, 'tool name is too long'), ToolInterface)
      .refine((tools) => Object.keys(tools).length <= MAX_TOOLS, `public_interface.tools names at most ${MAX_TOOLS}`)
      .optional()
      .meta({ description: 'Per MCP tool: its description, argument schema and example (mcp agents).' }),
  })
  .superRefine((value, ctx) => {
    if (JSON.stringify(value).length > PUBLIC_INTERFACE_MAX_BYTES)
      ctx.addIssue({ code: 'custom', message: `public_interface is larger than ${PUBLIC_INTERFACE_MAX_BYTES} bytes` });
    else if (nestsDeeperThan(value, PUBLIC_INTERFACE_MAX_DEPTH))
      ctx.addIssue({
        code: 'custom',
        message: `public_interface nests deeper than ${PUBLIC_INTERFACE_MAX_DEPTH} levels`,
      });
    else if (credentialLike(value))
      ctx.addIssue({ code: 'custom', message: 'public_interface must not hold a credential: it is shown to anyone' });
  })
  .meta({
    id: 'PublicInterface',
    description: `What any caller is shown about how to call the public agent (discovery catalog, v2 challenges). At most ${PUBLIC_INTERFACE_MAX_BYTES} bytes serialized and ${PUBLIC_INTERFACE_MAX_DEPTH} levels deep; a value shaped like a credential is refused (400).`,
  });
export type PublicInterfaceInput = z.infer<typeof PublicInterfaceInput>;
