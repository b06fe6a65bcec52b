// The OpenAPI 3.1 document, generated from the zod schemas the routes validate with (zod 4's
// z.toJSONSchema, JSON Schema 2020-12, which OpenAPI 3.1 uses as is): request bodies, path,
// query and header parameters, and every answer's body. The operations (api/openapi/
// endpoints-*.ts) only name those schemas and the statuses; no field is described twice.
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import type { RateCeiling } from '../agents/schema.ts';
import { catalogOperations } from './endpoints-catalog.ts';
import { budgetOperations } from './endpoints-budgets.ts';
import { callOperations, serviceOperations } from './endpoints-calls.ts';
import { publicOperations } from './endpoints-public.ts';
import { responsesOf, type Operation, type ResponseSpec } from './responses.ts';

type Json = Record<string, unknown>;
const ref = (id: string) => ({ $ref: `#/components/schemas/${id}` });

function idOf(schema: z.ZodType, id?: string): string {
  const found = id ?? z.globalRegistry.get(schema)?.id;
  if (typeof found !== 'string') throw new Error('every body schema needs an id (.meta({ id }) or the operation)');
  return found;
}

/**
 * What zod says, as the document says it. A request string may not hold U+0000 (api/validation.ts
 * refuses it in every JSON body): a request string schema without a pattern of its own says so.
 */
function overrider(io: 'input' | 'output', nulFree = io === 'input') {
  return ({ jsonSchema }: { jsonSchema: Record<string, unknown> }) => {
    if (jsonSchema.format === 'date-time') delete jsonSchema.pattern; // zod also spells it as a long regex
    if (io === 'output') {
      if (jsonSchema.maximum === Number.MAX_SAFE_INTEGER) delete jsonSchema.maximum;
      if (jsonSchema.minimum === Number.MIN_SAFE_INTEGER) delete jsonSchema.minimum;
    } else if (
      nulFree &&
      jsonSchema.type === 'string' &&
      jsonSchema.pattern === undefined &&
      jsonSchema.allOf === undefined &&
      jsonSchema.format === undefined &&
      jsonSchema.enum === undefined &&
      jsonSchema.const === undefined
    ) {
      jsonSchema.pattern = '^[^\\u0000]*$';
    }
  };
}

/** Request bodies are generated as zod inputs (defaults optional), answers as outputs. */
function generate(schemas: Array<[z.ZodType, string]>, io: 'input' | 'output'): Record<string, Json> {
  const registry = z.registry<{ id: string }>();
  for (const [schema, id] of schemas) if (!registry.has(schema)) registry.add(schema, { id });
  const { schemas: generated } = z.toJSONSchema(registry, {
    target: 'draft-2020-12',
    io,
    metadata: z.globalRegistry,
    uri: (id) => `#/components/schemas/${id}`,
    override: overrider(io),
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

/** Every body schema an operation uses (and the registered schemas they use), as components. */
function components(ops: Operation[]): Record<string, Json> {
  const inputs: Array<[z.ZodType, string]> = [];
  const outputs: Array<[z.ZodType, string]> = [];
  for (const op of ops) {
    if (op.body && 'schema' in op.body) inputs.push([op.body.schema, idOf(op.body.schema, op.body.id)]);
    for (const response of Object.values(responsesOf(op))) {
      if (response.body && !('mediaType' in response.body)) outputs.push([response.body, idOf(response.body)]);
      for (const alt of response.oneOf ?? []) outputs.push([alt, idOf(alt)]);
    }
  }
  const input = generate(inputs, 'input');
  const output = generate(outputs, 'output');
  for (const id of Object.keys(input))
    if (id in output && JSON.stringify(input[id]) !== JSON.stringify(output[id]))
      throw new Error(`schema ${id} differs as a request and as a response body`);
  return Object.fromEntries(Object.entries({ ...input, ...output }).sort(([a], [b]) => a.localeCompare(b)));
}

/** Path, query or header parameters from the object schema a route parses them with. */
function parameters(where: 'path' | 'query' | 'header', schema: z.ZodObject): Json[] {
  return Object.entries(schema.shape as Record<string, z.ZodType>).map(([name, field]) => {
    const {
      $schema: _s,
      description,
      ...json
    } = z.toJSONSchema(field, {
      target: 'draft-2020-12',
      io: 'input',
      // A query value is the parameter schema's own to keep free of U+0000 (api/validation.ts).
      override: overrider('input', false),
    }) as Json;
    return {
      name,
      in: where,
      required: where === 'path' || !field.safeParse(undefined).success,
      ...(description ? { description } : {}),
      schema: json,
    };
  });
}

function response(spec: ResponseSpec): Json {
  const out: Json = { description: spec.description };
  if (spec.body && 'mediaType' in spec.body) out.content = { [spec.body.mediaType]: {} };
  else if (spec.body) out.content = { 'application/json': { schema: ref(idOf(spec.body)) } };
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
  const params = [
    ...(op.params?.path ? parameters('path', op.params.path) : []),
    ...(op.params?.query ? parameters('query', op.params.query) : []),
    ...(op.params?.header ? parameters('header', op.params.header) : []),
  ];
  if (params.length) out.parameters = params;
  if (op.body) {
    const content =
      'schema' in op.body
        ? { 'application/json': { schema: ref(idOf(op.body.schema, op.body.id)) } }
        : { [op.body.mediaType]: {} };
    out.requestBody = { required: op.body.required, content };
  }
  out.responses = Object.fromEntries(Object.entries(responsesOf(op)).map(([status, spec]) => [status, response(spec)]));
  return out;
}

const packageVersion = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

/** The document for an API whose agents may set rates up to `ceiling` (the operator's settings). */
export function buildOpenApiDocument(ceiling: RateCeiling): Json {
  const ops = [
    ...serviceOperations,
    ...catalogOperations(ceiling),
    ...budgetOperations,
    ...callOperations,
    ...publicOperations,
  ];
  const paths: Record<string, Json> = {};
  for (const op of ops) (paths[op.path] ??= {})[op.method] = operation(op);
  return {
    openapi: '3.1.0',
    info: {
      title: 'Agent gateway API',
      version: packageVersion,
      description:
        "Per-tenant agent catalog, credential vault, settlement configuration and the proxy. Every /v1 resource needs `Authorization: Bearer <JWT>` with tenant and user claims; another tenant's ids behave as absent (404). 4xx bodies are `{error}`; 401 and 500 have no body. No request string may hold U+0000 or a lone UTF-16 surrogate (400). A rule the schemas cannot state (one field's value bounding another's, or what the tenant holds) is in the description of the schema or parameter it concerns.",
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
