// The OpenAPI 3.1 document, generated from the zod schemas the routes validate with (zod 4's
// z.toJSONSchema, JSON Schema 2020-12, which OpenAPI 3.1 uses as is). Nothing is written by
// hand twice: a field added to a schema appears here and in the reference page.
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { operations as allOperations, type Operation, type ResponseSpec } from './operations.ts';

type Json = Record<string, unknown>;
const ref = (id: string) => ({ $ref: `#/components/schemas/${id}` });

function idOf(schema: z.ZodType): string {
  const id = z.globalRegistry.get(schema)?.id;
  if (typeof id !== 'string') throw new Error('every schema in an operation needs .meta({ id })');
  return id;
}

/** Request bodies are generated as zod inputs (defaults optional), answers as outputs. */
function generate(schemas: z.ZodType[], io: 'input' | 'output'): Record<string, Json> {
  const registry = z.registry<{ id: string }>();
  for (const schema of schemas) if (!registry.has(schema)) registry.add(schema, { id: idOf(schema) });
  const { schemas: generated } = z.toJSONSchema(registry, {
    target: 'draft-2020-12',
    io,
    metadata: z.globalRegistry,
    uri: (id) => `#/components/schemas/${id}`,
    // zod spells date-time both as a format and a long regex; the format says it.
    override: ({ jsonSchema }) => {
      if (jsonSchema.format === 'date-time') delete jsonSchema.pattern;
      if (jsonSchema.maximum === Number.MAX_SAFE_INTEGER) delete jsonSchema.maximum;
      if (jsonSchema.minimum === Number.MIN_SAFE_INTEGER) delete jsonSchema.minimum;
    },
  });
  const out: Record<string, Json> = {};
  for (const [id, schema] of Object.entries(generated)) {
    const { $schema: _s, $id: _i, ...rest } = schema as Json;
    if (id === '__shared') {
      // Registered schemas reached only through others: hoist them to components too.
      for (const [defId, def] of Object.entries((rest.$defs ?? {}) as Record<string, Json>)) out[defId] = def;
    } else {
      out[id] = rest;
    }
  }
  return JSON.parse(JSON.stringify(out).replaceAll('#/components/schemas/__shared#/$defs/', '#/components/schemas/'));
}

/** Every registered schema an operation uses (and what they use), as components. */
function components(ops: Operation[]): Record<string, Json> {
  const inputs: z.ZodType[] = [];
  const outputs: z.ZodType[] = [];
  for (const op of ops) {
    if (op.body && 'schema' in op.body) inputs.push(op.body.schema);
    for (const response of Object.values(op.responses)) {
      if (response.body && !('mediaType' in response.body)) outputs.push(response.body as z.ZodType);
      outputs.push(...(response.oneOf ?? []));
    }
  }
  const input = generate(inputs, 'input');
  const output = generate(outputs, 'output');
  for (const id of Object.keys(input))
    if (id in output) throw new Error(`schema ${id} is used both as a request and a response body`);
  return Object.fromEntries(Object.entries({ ...input, ...output }).sort(([a], [b]) => a.localeCompare(b)));
}

function response(spec: ResponseSpec): Json {
  const out: Json = { description: spec.description };
  if (spec.body && 'mediaType' in spec.body) out.content = { [spec.body.mediaType]: {} };
  else if (spec.body) out.content = { 'application/json': { schema: ref(idOf(spec.body as z.ZodType)) } };
  else if (spec.oneOf) out.content = { 'application/json': { schema: { oneOf: spec.oneOf.map((s) => ref(idOf(s))) } } };
  if (spec.headers)
    out.headers = Object.fromEntries(
      Object.entries(spec.headers).map(([name, description]) => [name, { description, schema: { type: 'string' } }]),
    );
  return out;
}

function operation(op: Operation): Json {
  const out: Json = { operationId: op.operationId, tags: [op.tag], summary: op.summary };
  if (op.description) out.description = op.description;
  if (!op.auth) out.security = [];
  if (op.params?.length) {
    out.parameters = op.params.map((p) => ({
      name: p.name,
      in: p.in,
      required: p.in === 'path' ? true : Boolean(p.required),
      ...(p.description ? { description: p.description } : {}),
      schema: p.schema,
    }));
  }
  if (op.body) {
    const content =
      'schema' in op.body ? { 'application/json': { schema: ref(idOf(op.body.schema)) } } : { [op.body.mediaType]: {} };
    out.requestBody = { required: op.body.required, content };
  }
  out.responses = Object.fromEntries(Object.entries(op.responses).map(([status, spec]) => [status, response(spec)]));
  return out;
}

const packageVersion = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

function buildOpenApiDocument(ops: Operation[] = allOperations, version = packageVersion): Json {
  const paths: Record<string, Json> = {};
  for (const op of ops) (paths[op.path] ??= {})[op.method] = operation(op);
  return {
    openapi: '3.1.0',
    info: {
      title: 'Agent gateway API',
      version,
      description:
        "Per-tenant agent catalog, credential vault, settlement configuration and the proxy. Every /v1 resource needs `Authorization: Bearer <JWT>` with tenant and user claims; another tenant's ids behave as absent (404). 4xx bodies are `{error}`; 401 and 500 have no body.",
    },
    servers: [{ url: '/' }],
    security: [{ bearerAuth: [] }],
    tags: [...new Set(ops.map((o) => o.tag))].map((name) => ({ name })),
    paths,
    components: {
      securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } },
      schemas: components(ops),
    },
  };
}

let cached: Json | undefined;
/** The document is a pure function of the code: build it once per process. */
export function openApiDocument(): Json {
  cached ??= buildOpenApiDocument();
  return cached;
}
