// The rendered API reference: one self-contained HTML page built on the server from the same
// OpenAPI document (no script, no CDN), so it works offline and cannot drift from the JSON.
type Json = Record<string, any>;
const NO_NUL_PATTERN = '^[^\\u0000]*$';

const esc = (s: unknown) =>
  String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
const anchor = (s: string) => s.replace(/[^A-Za-z0-9_-]/g, '-');
const refName = (r: string) => r.split('/').pop()!;

function typeOf(schema: Json | undefined): string {
  if (!schema || Object.keys(schema).length === 0) return 'any';
  if (schema.not && Object.keys(schema.not).length === 0) return 'not accepted here';
  if (schema.$ref) return `<a href="#schema-${anchor(refName(schema.$ref))}">${esc(refName(schema.$ref))}</a>`;
  if (schema.anyOf) return schema.anyOf.map(typeOf).join(' | ');
  if (schema.oneOf) return schema.oneOf.map(typeOf).join(' | ');
  if (schema.const !== undefined) return `<code>${esc(JSON.stringify(schema.const))}</code>`;
  if (schema.enum) return schema.enum.map((v: unknown) => `<code>${esc(JSON.stringify(v))}</code>`).join(' | ');
  if (schema.type === 'array') return `array of ${typeOf(schema.items)}`;
  if (schema.type === 'object' && !schema.properties)
    return schema.additionalProperties && Object.keys(schema.additionalProperties).length
      ? `map of ${typeOf(schema.additionalProperties)}`
      : 'object';
  const types = Array.isArray(schema.type) ? schema.type.join(' | ') : (schema.type ?? 'any');
  return esc(schema.format ? `${types} (${schema.format})` : types);
}

function constraints(schema: Json): string {
  const parts: string[] = [];
  for (const key of [
    'minLength',
    'maxLength',
    'minimum',
    'maximum',
    'exclusiveMinimum',
    'maxItems',
    'pattern',
    'default',
  ]) {
    // Every request string excludes U+0000 (the document's description says so): not repeated per field.
    if (key === 'pattern' && schema.pattern === NO_NUL_PATTERN) continue;
    if (schema[key] !== undefined) parts.push(`${key}: ${JSON.stringify(schema[key])}`);
  }
  for (const alt of schema.anyOf ?? []) if (alt.type !== 'null') parts.push(constraints(alt));
  return parts.filter(Boolean).join(', ');
}

function fieldTable(schema: Json): string {
  // A body of variants (one per protocol, per credential source and auth type): each its table.
  const variants: Json[] | undefined = schema.oneOf;
  if (!schema.properties && variants?.every((v) => v.properties || v.oneOf))
    return `<p>One of:</p><ol>${variants.map((v) => `<li>${fieldTable(v)}</li>`).join('')}</ol>`;
  if (!schema.properties) return `<p>${typeOf(schema)}</p>`;
  const required = new Set<string>(schema.required ?? []);
  const rows = Object.entries(schema.properties as Record<string, Json>).map(
    ([name, prop]) =>
      `<tr><td><code>${esc(name)}</code>${required.has(name) ? ' <span class="req">required</span>' : ''}</td><td>${typeOf(prop)}</td><td>${esc(prop.description ?? '')}${constraints(prop) ? `<div class="muted">${esc(constraints(prop))}</div>` : ''}${prop.properties ? fieldTable(prop) : ''}</td></tr>`,
  );
  const extra =
    schema.additionalProperties === false ? '<p class="muted">No other fields are accepted or returned.</p>' : '';
  return `<table><thead><tr><th>Field</th><th>Type</th><th>Notes</th></tr></thead><tbody>${rows.join('')}</tbody></table>${extra}`;
}

function mediaSchema(content: Json | undefined): string {
  if (!content) return '';
  return Object.entries(content)
    .map(([type, media]) => `<span class="muted">${esc(type)}</span> ${media.schema ? typeOf(media.schema) : ''}`)
    .join('<br>');
}

function operationHtml(path: string, method: string, op: Json): string {
  const params = (op.parameters ?? []) as Json[];
  const paramTable = params.length
    ? `<h4>Parameters</h4><table><thead><tr><th>Name</th><th>In</th><th>Type</th><th>Notes</th></tr></thead><tbody>${params
        .map(
          (p) =>
            `<tr><td><code>${esc(p.name)}</code>${p.required ? ' <span class="req">required</span>' : ''}</td><td>${esc(p.in)}</td><td>${typeOf(p.schema)}</td><td>${esc(p.description ?? '')}${constraints(p.schema ?? {}) ? `<div class="muted">${esc(constraints(p.schema))}</div>` : ''}</td></tr>`,
        )
        .join('')}</tbody></table>`
    : '';
  const body = op.requestBody
    ? `<h4>Request body${op.requestBody.required ? '' : ' (optional)'}</h4><p>${mediaSchema(op.requestBody.content)}</p>`
    : '';
  const responses = Object.entries(op.responses as Record<string, Json>)
    .map(
      ([status, r]) =>
        `<tr><td><code>${esc(status)}</code></td><td>${esc(r.description)}${r.headers ? `<div class="muted">headers: ${Object.keys(r.headers).map(esc).join(', ')}</div>` : ''}</td><td>${mediaSchema(r.content) || '<span class="muted">no body</span>'}</td></tr>`,
    )
    .join('');
  const auth =
    Array.isArray(op.security) && op.security.length === 0
      ? '<span class="tag">no auth</span>'
      : '<span class="tag">bearer token</span>';
  return `<section class="op" id="op-${esc(op.operationId)}"><h3><span class="method ${esc(method)}">${esc(method.toUpperCase())}</span> <code>${esc(path)}</code> ${auth}</h3>
<p><strong>${esc(op.summary)}</strong></p>${op.description ? `<p>${esc(op.description)}</p>` : ''}${paramTable}${body}
<h4>Responses</h4><table><thead><tr><th>Status</th><th>Meaning</th><th>Body</th></tr></thead><tbody>${responses}</tbody></table></section>`;
}

export function renderReferencePage(doc: Json): string {
  const byTag = new Map<string, string[]>();
  const nav = new Map<string, string[]>();
  for (const [path, methods] of Object.entries(doc.paths as Record<string, Json>)) {
    for (const [method, op] of Object.entries(methods as Record<string, Json>)) {
      const tag = op.tags?.[0] ?? 'Other';
      if (!byTag.has(tag)) {
        byTag.set(tag, []);
        nav.set(tag, []);
      }
      byTag.get(tag)!.push(operationHtml(path, method, op));
      nav.get(tag)!.push(`<li><a href="#op-${esc(op.operationId)}">${esc(method.toUpperCase())} ${esc(path)}</a></li>`);
    }
  }
  const schemas = Object.entries((doc.components?.schemas ?? {}) as Record<string, Json>)
    .map(
      ([name, schema]) =>
        `<section class="schema" id="schema-${anchor(name)}"><h3>${esc(name)}</h3>${schema.description ? `<p>${esc(schema.description)}</p>` : ''}${fieldTable(schema)}</section>`,
    )
    .join('');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(doc.info.title)} ${esc(doc.info.version)}</title>
<style>
body{font:15px/1.5 system-ui,sans-serif;margin:0;display:flex;color:#1d1d1f}
nav{width:290px;flex:none;height:100vh;overflow:auto;position:sticky;top:0;background:#f5f5f7;padding:1rem;box-sizing:border-box;font-size:13px}
nav ul{list-style:none;padding-left:.5rem}main{padding:1rem 2rem;max-width:1000px}
table{border-collapse:collapse;width:100%;margin:.5rem 0}th,td{border:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:#fafafa}.method{font-weight:700;padding:.1rem .4rem;border-radius:4px;color:#fff;background:#555}
.get{background:#2b7bb9}.post{background:#2e8540}.put{background:#b36b00}.patch{background:#7a4fb3}.delete{background:#c0392b}
.req{color:#c0392b;font-size:11px}.muted{color:#777;font-size:12px}.tag{font-size:11px;border:1px solid #ccc;border-radius:3px;padding:0 .3rem;color:#555}
section.op,section.schema{border-top:1px solid #eee;padding-top:.5rem;margin-top:1.5rem}code{font-size:13px}
</style></head><body>
<nav><strong>${esc(doc.info.title)}</strong><div class="muted">OpenAPI ${esc(doc.openapi)} · <a href="/v1/openapi.json">openapi.json</a></div>
${[...nav.entries()].map(([tag, items]) => `<h4>${esc(tag)}</h4><ul>${items.join('')}</ul>`).join('')}<h4><a href="#schemas">Schemas</a></h4></nav>
<main><h1>${esc(doc.info.title)} <span class="muted">${esc(doc.info.version)}</span></h1><p>${esc(doc.info.description ?? '')}</p>
${[...byTag.entries()].map(([tag, ops]) => `<h2 id="tag-${anchor(tag)}">${esc(tag)}</h2>${ops.join('')}`).join('')}
<h2 id="schemas">Schemas</h2>${schemas}</main></body></html>`;
}
