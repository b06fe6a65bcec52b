// Property-based fuzzing of the whole API from its own description: Schemathesis (PyPI, pinned in
// scripts/lib/tools.ts, installed into .tools/venv) reads GET /v1/openapi.json of the live test
// stack and sends generated requests to every operation (examples, boundary values, random
// data, and sequences that reuse what one call created), with a valid bearer token of a tenant
// of its own. Path parameters are, half the time, the ids of a real agent, credential and
// invocation, so generated calls reach past the 404; the proxy paths always name an agent with
// a real upstream, which no other operation is given (so none deletes or suspends it on purpose).
// What it checks is SCHEMATHESIS_CHECKS, every check Schemathesis has but
// object_level_authorization (which needs a second tenant's token); a failure prints
// Schemathesis's own report, each failing case with a curl command that repeats it. Rules no
// JSON Schema can state (since before until, the 31-day analytics window, an opaque cursor, what
// the tenant holds, a PATCH or PUT checked on the resource it leaves, an EIP-55 checksum, an
// upstream the SSRF guard admits) are in the document's descriptions; the hooks in
// test/support/schemathesis_hooks.py make every request generated as valid respect them (a real
// next_cursor, the seeded credentials, the test upstream, ...), so positive_data_acceptance
// holds for every operation. Seeded like the fast-check suites (FC_SEED, a fixed default, so
// CI draws the same cases every run; FC_SCALE multiplies the examples).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureTool } from '../../scripts/lib/tools.ts';
import { stack } from '../support/stack.ts';
import { call, uniqueName, waitForInvocation } from '../support/http.ts';
import { startUpstream, type TestUpstream } from '../support/upstream.ts';
import { startA2aServer, type A2aUpstream } from '../support/a2a-server.ts';
import { FUZZ_SCALE, FUZZ_SEED } from '../support/fuzz.ts';
import { clientTlsBundle } from '../support/catalog.ts';

/**
 * What every generated answer must satisfy: no 5xx for anything a caller can send; a method a
 * path does not serve is a 405 whose Allow names the documented methods; an operation that
 * needs the token refuses a call without it; a created resource can be read, a deleted one no
 * longer (a deleted agent reads back as inactive: a soft delete, the hooks' filter_failure); a
 * missing required header is refused; every status, content type, header and body is the
 * document's; a request the document allows is accepted and one it refuses is refused.
 */
const SCHEMATHESIS_CHECKS = [
  'not_a_server_error',
  'unsupported_method',
  'allow_header_conformance',
  'ignored_auth',
  'ensure_resource_availability',
  'use_after_free',
  'missing_required_header',
  'status_code_conformance',
  'content_type_conformance',
  'response_headers_conformance',
  'response_schema_conformance',
  'positive_data_acceptance',
  'negative_data_rejection',
];
/** Per operation and phase: 65-115 s of Schemathesis in all on the 2-core test machine, beside other test runs (measured 2026-11-27, seed 20261122). */
const MAX_EXAMPLES = Math.max(1, Math.round(60 * FUZZ_SCALE));
/**
 * A run that outlives this is stopped and fails: it must never hold the suite. Beside two other
 * shards of the suite on the 2-core test machine its coverage phase alone took 134 s and the run
 * did not end within 180 s (2026-11-28), hence the room.
 */
const RUN_LIMIT_MS = 420_000 * Math.max(1, FUZZ_SCALE);

type Run = { code: number | null; output: string };

function runSchemathesis(args: string[], cwd: string, env: Record<string, string>): Promise<Run> {
  // Asynchronously: the API under test answers from this very process.
  const child = spawn(ensureTool('schemathesis'), args, {
    cwd,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  for (const stream of [child.stdout, child.stderr]) stream.on('data', (chunk: Buffer) => (output += chunk));
  const limit = setTimeout(() => {
    output += `\n(stopped after ${RUN_LIMIT_MS / 1000} s)\n`;
    child.kill('SIGKILL');
  }, RUN_LIMIT_MS);
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => {
      clearTimeout(limit);
      resolve({ code, output });
    });
  });
}

/** The report from its failures section on (the whole report when it has none), bounded. */
function report(output: string): string {
  const failures = output.search(/^=+ FAILURES =+$/m);
  const shown = failures >= 0 ? output.slice(failures) : output;
  return shown.length > 60_000 ? `${shown.slice(0, 60_000)}\n… (${shown.length - 60_000} more characters)` : shown;
}

const toml = (value: string) => JSON.stringify(value);

describe('Schemathesis: the API fuzzed from its OpenAPI document', function () {
  this.timeout(RUN_LIMIT_MS + 60_000);
  let upstream: TestUpstream;
  let a2aUpstream: A2aUpstream;
  let dir: string;

  before(async () => {
    upstream = await startUpstream();
    a2aUpstream = await startA2aServer();
    dir = mkdtempSync(join(tmpdir(), 'schemathesis-'));
  });
  after(async () => {
    await upstream.close();
    await a2aUpstream.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it(`passes every check on every generated request (checks: ${SCHEMATHESIS_CHECKS.join(', ')})`, async () => {
    const tenant = `tenant-schemathesis-${randomUUID()}`;
    const token = await stack().token(tenant);
    const credential = await call('POST', '/v1/credentials', {
      token,
      json: { name: uniqueName('cred'), auth_type: 'bearer', source: 'managed', plaintext: randomUUID() },
    });
    assert.equal(credential.status, 201, credential.text);
    const pem = await call('POST', '/v1/credentials', {
      token,
      json: { name: uniqueName('pem'), auth_type: 'none', source: 'managed', plaintext: clientTlsBundle() },
    });
    assert.equal(pem.status, 201, pem.text);
    const agent = async () => {
      const created = await call('POST', '/v1/agents', {
        token,
        json: {
          name: uniqueName(),
          upstream_url: upstream.url,
          credential_ref: credential.json.id,
          emit_receipts: true,
        },
      });
      assert.equal(created.status, 201, created.text);
      return created.json.id as string;
    };
    const proxied = await agent();
    const managed = await agent();
    const invoke = async () => {
      const invoked = await call('POST', `/v1/proxy/${proxied}`, { token, body: '{}' });
      assert.equal(invoked.status, 202, invoked.text);
      await waitForInvocation(token, proxied, invoked.json.invocation_id);
      return invoked.json.invocation_id as string;
    };
    await invoke();
    const invocation = await invoke();
    // An MCP agent, and two virtual MCP servers of it (their list has a next_cursor).
    const mcpAgent = await call('POST', '/v1/agents', {
      token,
      json: { name: uniqueName('mcp'), upstream_url: upstream.url, protocol: 'mcp', mcp_transport: 'streamable_http' },
    });
    assert.equal(mcpAgent.status, 201, mcpAgent.text);
    for (let i = 0; i < 2; i++) {
      const server = await call('POST', '/v1/mcp-servers', {
        token,
        json: { name: uniqueName('mcps'), members: [{ agent_id: mcpAgent.json.id }] },
      });
      assert.equal(server.status, 201, server.text);
    }
    // Two soft budgets scoped to an agent no call names: listed, never refusing the run's calls.
    for (let i = 0; i < 2; i++) {
      const budget = await call('POST', '/v1/budgets', {
        token,
        json: {
          name: uniqueName('budget'),
          scope: { agent_id: 'agt_01900000-0000-7000-8000-000000000001' },
          limit: { calls: 10 },
          window: 'day',
          mode: 'soft',
        },
      });
      assert.equal(budget.status, 201, budget.text);
    }
    // Two of each listed resource, so a page of one has a real next_cursor to reuse.
    const cursors: Record<string, string> = {};
    for (const path of ['/v1/agents', '/v1/credentials', '/v1/invocations', '/v1/mcp-servers', '/v1/budgets']) {
      const page = await call('GET', `${path}?limit=1`, { token });
      assert.equal(typeof page.json?.next_cursor, 'string', page.text);
      cursors[path] = page.json.next_cursor;
    }

    const config = join(dir, 'schemathesis.toml');
    const invocations = `{ dictionary = "invocations", probability = 0.5 }`;
    writeFileSync(
      config,
      [
        'headers = { Authorization = "Bearer ${GATEWAY_TOKEN}" }',
        '[dictionaries.ids]',
        `values = [${toml(managed)}, ${toml(credential.json.id)}]`,
        '[dictionaries.agents]',
        `values = [${toml(proxied)}, ${toml(managed)}]`,
        '[dictionaries.invocations]',
        `values = [${toml(invocation)}]`,
        '[parameters]',
        '"path.id" = { dictionary = "ids", probability = 0.5 }',
        `"path.inv_id" = ${invocations}`,
        '"query.agent_id" = { dictionary = "agents", probability = 0.5 }',
        '[[operations]]',
        'include-path-regex = "^/v1/proxy/"',
        `parameters = { "path.id" = ${toml(proxied)}, "path.inv_id" = ${invocations} }`,
        '',
      ].join('\n'),
    );
    const run = await runSchemathesis(
      [
        '--config-file',
        config,
        'run',
        `${stack().apiUrl}/v1/openapi.json`,
        '--checks',
        SCHEMATHESIS_CHECKS.join(','),
        '--max-examples',
        String(MAX_EXAMPLES),
        '--seed',
        String(FUZZ_SEED),
        '--workers',
        '2',
        '--generation-database',
        'none',
        '--no-color',
      ],
      dir,
      {
        GATEWAY_TOKEN: token,
        SCHEMATHESIS_HOOKS: 'schemathesis_hooks',
        PYTHONPATH: join(import.meta.dirname, '..', 'support'),
        FUZZ_API_URL: stack().apiUrl,
        FUZZ_TENANT: tenant,
        FUZZ_UPSTREAM_URL: upstream.url,
        // An A2A agent's upstream must serve an Agent Card (read on create).
        FUZZ_A2A_UPSTREAM_URL: a2aUpstream.url,
        FUZZ_CREDENTIAL: credential.json.id,
        FUZZ_PROXIED_AGENT: proxied,
        FUZZ_MCP_AGENT: mcpAgent.json.id,
        FUZZ_PEM_CREDENTIAL: pem.json.id,
        FUZZ_PEM_BUNDLE: clientTlsBundle(),
        FUZZ_FACILITATOR_URL: 'https://facilitator.example.com',
        FUZZ_CURSORS: JSON.stringify(cursors),
      },
    );
    if (process.env.TEST_VERBOSE) console.log(run.output);
    assert.equal(run.code, 0, `Schemathesis failed (exit ${run.code}):\n${report(run.output)}`);
  });
});
