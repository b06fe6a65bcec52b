// fast-check arbitraries for every body, query string and header the gateway and the
// facilitator accept. Each body generator mixes three kinds of case: valid documents (so the
// deep paths and the database writes run), near-valid ones (every field drawn from "valid or
// wrong" independently, unknown keys now and then) and arbitrary JSON.
import fc from 'fast-check';
import { getAddress, hexlify } from 'ethers';
import { MCP_PROTOCOL_VERSIONS } from '../../api/agents/schema.ts';

// ---------------------------------------------------------------- building blocks

/** Strings a careless parser or a database chokes on, and ordinary ones. */
export const nastyString: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 20 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 20 }) },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      '',
      ' ',
      '  padded  ',
      '\u0000',
      'nul\u0000inside',
      '\n',
      '\r\n',
      'null',
      'true',
      '0',
      '-1',
      '1e309',
      'NaN',
      '__proto__',
      'constructor',
      '../../etc/passwd',
      "'; drop table agents; --",
      '%00%ff%',
      '\ud800',
      '\udfff\ud800',
      '🙂‍↔️',
      '<script>alert(1)</script>',
      '${jndi:ldap://x}',
      'a'.repeat(201),
      'x'.repeat(5000),
    ),
  },
);

/** A JSON value of some type other than the one a field wants (and sometimes the same). */
export const wrongType: fc.Arbitrary<unknown> = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.jsonValue({ maxDepth: 1 }), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 6 }), fc.jsonValue({ maxDepth: 1 }), { maxKeys: 3 }),
  nastyString,
);

export const anyJson: fc.Arbitrary<unknown> = fc.jsonValue({ maxDepth: 3 });

/** Mostly the valid value, sometimes a wrong one. */
function field<T>(valid: fc.Arbitrary<T>, validWeight = 4): fc.Arbitrary<unknown> {
  return fc.oneof(
    { weight: validWeight, arbitrary: valid as fc.Arbitrary<unknown> },
    { weight: 1, arbitrary: wrongType },
  );
}

/** A record whose keys are each optional, plus now and then an unknown key. */
function looseRecord(
  model: Record<string, fc.Arbitrary<unknown>>,
  required: string[] = [],
): fc.Arbitrary<Record<string, unknown>> {
  const base = fc.record(model, { requiredKeys: required as never[] }) as fc.Arbitrary<Record<string, unknown>>;
  const extra = fc.oneof(
    { weight: 8, arbitrary: fc.constant({}) },
    {
      weight: 1,
      arbitrary: fc.dictionary(
        fc.oneof(
          fc.string({ maxLength: 12 }),
          fc.constantFrom('id', 'tenant_id', 'status', 'version', '__proto__', 'secret'),
        ),
        anyJson,
        { minKeys: 1, maxKeys: 2 },
      ),
    },
  );
  return fc.tuple(base, extra).map(([b, e]) => ({ ...e, ...b }));
}

/** A body: mostly a (near-valid) record, sometimes arbitrary JSON of any shape. */
function bodyOf(record: fc.Arbitrary<Record<string, unknown>>): fc.Arbitrary<unknown> {
  return fc.oneof({ weight: 9, arbitrary: record as fc.Arbitrary<unknown> }, { weight: 1, arbitrary: anyJson });
}

/**
 * A valid document with exactly one thing wrong: one key replaced by a wrong value, removed,
 * or joined by an unknown key.
 */
function mutateOne(
  valid: fc.Arbitrary<Record<string, unknown>>,
  keys: string[],
): fc.Arbitrary<Record<string, unknown>> {
  return fc
    .tuple(
      valid,
      fc.constantFrom(...keys),
      fc.constantFrom('wrong', 'wrong', 'drop', 'extra'),
      wrongType,
      fc.string({ minLength: 1, maxLength: 10 }),
    )
    .map(([doc, key, how, value, extraKey]) => {
      const copy: Record<string, unknown> = { ...doc };
      if (how === 'wrong') copy[key] = value;
      else if (how === 'drop') delete copy[key];
      else copy[keys.includes(extraKey) ? `${extraKey}_x` : extraKey] = value;
      return copy;
    });
}

/** The usual mix: valid documents, one-thing-wrong ones, loose records and arbitrary JSON. */
function bodyMix(
  valid: fc.Arbitrary<Record<string, unknown>>,
  loose: fc.Arbitrary<Record<string, unknown>>,
  keys: string[],
): fc.Arbitrary<unknown> {
  return fc.oneof(
    { weight: 4, arbitrary: valid as fc.Arbitrary<unknown> },
    { weight: 4, arbitrary: mutateOne(valid, keys) as fc.Arbitrary<unknown> },
    { weight: 2, arbitrary: loose as fc.Arbitrary<unknown> },
    { weight: 1, arbitrary: anyJson },
  );
}

const evmAddressBytes = fc.uint8Array({ minLength: 20, maxLength: 20 }).map((b) => hexlify(b));

/** An address as callers write it: lower case, checksummed, upper case, or broken checksum. */
const evmAddress: fc.Arbitrary<string> = fc
  .tuple(evmAddressBytes, fc.constantFrom('lower', 'checksum', 'upper', 'badcase'))
  .map(([a, how]) => {
    if (how === 'lower') return a;
    if (how === 'upper') return `0x${a.slice(2).toUpperCase()}`;
    const sum = getAddress(a);
    if (how === 'checksum') return sum;
    // Flip the case of one letter of the checksummed form (if it has one).
    const i = [...sum].findIndex((c, k) => k > 1 && /[a-fA-F]/.test(c));
    return i < 0
      ? sum
      : sum.slice(0, i) +
          (sum[i] === sum[i].toUpperCase() ? sum[i].toLowerCase() : sum[i].toUpperCase()) +
          sum.slice(i + 1);
  });

const UINT256_MAX = (1n << 256n) - 1n;
const decimalAmount: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.bigInt({ min: 1n, max: 10n ** 12n }).map(String) },
  { weight: 1, arbitrary: fc.bigInt({ min: 1n, max: UINT256_MAX }).map(String) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      '0',
      '01',
      '1.5',
      '-1',
      '1e6',
      ' 5',
      '0x10',
      UINT256_MAX.toString(),
      (UINT256_MAX + 1n).toString(),
      '9'.repeat(79),
      '٣',
    ),
  },
);

export const idLike = (prefix: string) =>
  fc.oneof(
    fc.uuid({ version: 7 }).map((u) => `${prefix}_${u}`),
    fc.uuid().map((u) => `${prefix}_${u}`),
    fc.constantFrom(`${prefix}_`, `${prefix}_0190a0a0-0000-7000-8000-000000000000`, prefix, 'agt_x', 'cred_../../x'),
  );

// ---------------------------------------------------------------- agents

const upstreamUrl = (allowed: string) =>
  fc.oneof(
    { weight: 3, arbitrary: fc.constant(allowed) },
    { weight: 2, arbitrary: fc.constantFrom('https://agent.example.com/v1', 'http://api.example.org:8080/path?q=1') },
    { weight: 2, arbitrary: fc.webUrl({ withQueryParameters: true, withFragments: true }) },
    {
      weight: 2,
      arbitrary: fc.constantFrom(
        'http://10.0.0.1/',
        'http://[::1]/',
        'http://localhost/',
        'http://LOCALHOST./x',
        'http://2130706433/',
        'http://0x7f.1/',
        'http://017700000001/',
        'http://[::ffff:127.0.0.1]/',
        'http://169.254.169.254/latest/meta-data',
        'ftp://example.com/',
        'file:///etc/passwd',
        'https://',
        'example.com',
        'http://example.com:99999/',
        'http://user:pass@example.com/',
        'javascript:alert(1)',
      ),
    },
    { weight: 1, arbitrary: fc.constant(null) },
    { weight: 1, arbitrary: wrongType },
  );

/** A meter of metered (upto) pricing: valid ones, and ones each field of which may be wrong. */
const meter = fc.oneof(
  fc.record({
    kind: fc.constantFrom('header', 'header', 'tokens', 'bytes'),
    header: fc.oneof(
      fc.constantFrom('X-Usage-Cost', 'x-cost', 'Content-Length', 'X-Gateway-Cost', 'a b', ''),
      nastyString,
    ),
  }),
  fc.record(
    {
      kind: fc.constantFrom('tokens', 'tokens', 'header'),
      input_per_1k: fc.oneof(decimalAmount, fc.constantFrom('0', '01', '-1', '1.5'), nastyString),
      output_per_1k: fc.oneof(decimalAmount, fc.constant('0')),
    },
    { requiredKeys: ['kind', 'input_per_1k'] },
  ),
  fc.constant(null),
);

const pricingValid = fc.record(
  {
    amount: decimalAmount,
    asset: fc.constantFrom('USDC', 'USDC', 'usdc', 'ETH'),
    network: fc.constantFrom('base', 'base', 'base-sepolia', 'ethereum'),
    pay_to: evmAddress,
    tools: fc.dictionary(
      fc.oneof(fc.string({ maxLength: 10 }), fc.constantFrom('search', 'read_file')),
      fc.oneof(decimalAmount, fc.constant('0')),
      { maxKeys: 3 },
    ),
    scheme: fc.constantFrom('exact', 'upto', 'upto', 'batch'),
    meter,
  },
  { requiredKeys: ['amount', 'asset', 'network', 'pay_to'] },
);

function agentFields(refs: { upstreamUrl: string; credentialIds: string[] }): Record<string, fc.Arbitrary<unknown>> {
  const credentialRef = fc.oneof(
    ...(refs.credentialIds.length ? [{ weight: 3, arbitrary: fc.constantFrom(...refs.credentialIds) }] : []),
    { weight: 1, arbitrary: idLike('cred') },
    { weight: 1, arbitrary: fc.constant(null) },
  );
  return {
    name: field(
      fc.oneof(
        { weight: 4, arbitrary: fc.string({ minLength: 1, maxLength: 30 }) },
        { weight: 1, arbitrary: fc.constantFrom('dup-a', 'dup-b', ' dup-a ', '') },
        { weight: 1, arbitrary: nastyString },
      ),
      6,
    ),
    description: field(fc.oneof(nastyString, fc.constant(null))),
    tags: field(fc.array(nastyString, { maxLength: 5 })),
    metadata: field(fc.dictionary(nastyString, anyJson, { maxKeys: 4 })),
    upstream_url: upstreamUrl(refs.upstreamUrl),
    credential_ref: field(credentialRef),
    emit_receipts: field(fc.boolean()),
    capture_body: field(fc.boolean()),
    protocol: field(fc.constantFrom('http', 'mcp', 'MCP', 'grpc')),
    mcp_transport: field(fc.constantFrom('streamable_http', 'sse', null)),
    mcp_protocol_version: field(fc.oneof(fc.constantFrom(...MCP_PROTOCOL_VERSIONS), fc.constant(null), nastyString)),
    pricing: field(fc.oneof({ weight: 4, arbitrary: pricingValid }, { weight: 1, arbitrary: fc.constant(null) }), 2),
    rate_limit_rps: field(
      fc.oneof(
        fc.double({ min: -10, max: 200_000, noNaN: true }),
        fc.integer({ min: 1, max: 1000 }),
        fc.constant(null),
      ),
    ),
    rate_limit_burst: field(
      fc.oneof(fc.integer({ min: -5, max: 200_000 }), fc.double({ noNaN: true }), fc.constant(null)),
    ),
    retry_non_idempotent: field(fc.boolean()),
  };
}

const validPricing = (mcp: boolean) =>
  fc.record(
    {
      amount: fc.bigInt({ min: 1n, max: 10n ** 12n }).map(String),
      asset: fc.constant('USDC'),
      network: fc.constant('base'),
      pay_to: evmAddressBytes.chain((a) => fc.constantFrom(a, getAddress(a))),
      ...(mcp
        ? {
            tools: fc.dictionary(
              fc.string({ minLength: 1, maxLength: 10 }),
              fc.bigInt({ min: 0n, max: 10n ** 9n }).map(String),
              { maxKeys: 3 },
            ),
          }
        : {}),
    },
    { requiredKeys: ['amount', 'asset', 'network', 'pay_to'] },
  );

/** An agent document the create rules accept (names may still collide: 409). */
function validAgent(
  refs: { upstreamUrl: string; credentialIds: string[] },
  withName = true,
): fc.Arbitrary<Record<string, unknown>> {
  return fc.boolean().chain((mcp) =>
    fc.record(
      {
        ...(withName
          ? {
              name: fc.oneof(
                { weight: 5, arbitrary: fc.string({ minLength: 1, maxLength: 40 }).filter((n) => n.trim().length > 0) },
                { weight: 1, arbitrary: fc.constantFrom('dup-a', 'dup-b', ' dup-a ') },
              ),
            }
          : {}),
        description: fc.oneof(fc.string({ maxLength: 50 }), fc.constant(null)),
        tags: fc.array(fc.string({ minLength: 1, maxLength: 20 }), { maxLength: 4 }),
        metadata: fc.dictionary(fc.string({ maxLength: 10 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
        upstream_url: fc.constantFrom(refs.upstreamUrl, 'https://agent.example.com/v1', null),
        credential_ref: fc.constantFrom(...refs.credentialIds, null),
        emit_receipts: fc.boolean(),
        capture_body: fc.boolean(),
        protocol: fc.constant(mcp ? 'mcp' : 'http'),
        ...(mcp
          ? {
              mcp_transport: fc.constant('streamable_http'),
              mcp_protocol_version: fc.constantFrom(...MCP_PROTOCOL_VERSIONS, null),
            }
          : {}),
        pricing: fc.oneof(validPricing(mcp), fc.constant(null)),
        rate_limit_rps: fc.oneof(fc.double({ min: 0.01, max: 100_000, noNaN: true }), fc.constant(null)),
        retry_non_idempotent: fc.boolean(),
      },
      { requiredKeys: withName ? ['name'] : [] },
    ),
  ) as fc.Arbitrary<Record<string, unknown>>;
}

const AGENT_KEYS = [
  'name',
  'description',
  'tags',
  'metadata',
  'upstream_url',
  'credential_ref',
  'emit_receipts',
  'capture_body',
  'protocol',
  'mcp_transport',
  'mcp_protocol_version',
  'pricing',
  'rate_limit_rps',
  'rate_limit_burst',
  'retry_non_idempotent',
];

export const agentCreateBody = (refs: { upstreamUrl: string; credentialIds: string[] }) =>
  bodyMix(validAgent(refs), looseRecord(agentFields(refs), ['name']), AGENT_KEYS);

export const agentPatchBody = (refs: { upstreamUrl: string; credentialIds: string[] }) =>
  bodyMix(
    validAgent(refs, false).chain((doc) =>
      fc.subarray(Object.keys(doc)).map((keys) => Object.fromEntries(keys.map((k) => [k, doc[k]]))),
    ),
    looseRecord(agentFields(refs)),
    AGENT_KEYS,
  );

// ---------------------------------------------------------------- credentials

const printableSecret = fc.string({
  unit: fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)),
  minLength: 1,
  maxLength: 80,
});

const plaintext: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 6, arbitrary: printableSecret },
  { weight: 2, arbitrary: nastyString },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      'two\nlines',
      ' edge',
      'edge ',
      'x'.repeat(65_537),
      '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n',
    ),
  },
  { weight: 1, arbitrary: wrongType },
);

// `{tenant}` in a vault_ref stands for the caller's tenant id (withTenant puts it in): a
// reference is valid only under the caller's own prefix.
const vaultRef: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      'secret/data/tenants/{tenant}/agents/foo#token',
      'kv/data/agents/foo#token',
      'secret/data/a/b#c',
    ),
  },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      'secret/data/tenants/{tenant}/../other/x#token',
      'secret/data/tenants/{tenant}/%2e%2e/x#token',
      'secret/data/tenants/{tenant}%2fx#token',
      'secret/data/tenants/{tenant}//x#token',
      'secret/data/tenants/{tenant}2/x#token',
      'secret/data/tenants/{tenant}#token',
      'secret/metadata/tenants/{tenant}/x#token',
    ),
  },
  { weight: 2, arbitrary: fc.stringMatching(/^[a-z]{1,6}\/data\/[a-z0-9_/.-]{1,20}#[a-z_]{1,8}$/) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      'kv/data/../sys#x',
      'kv/data/a',
      'kv/metadata/a#b',
      '#',
      'kv/data/a#b#c',
      'kv//data/a#b',
      'kv/data/a#b'.repeat(60),
    ),
  },
  { weight: 1, arbitrary: wrongType },
);

const headerName: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom('X-API-Key', 'X-Upstream-Token', 'api-key') },
  { weight: 2, arbitrary: fc.stringMatching(/^[A-Za-z][A-Za-z0-9-]{0,20}$/) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      'Host',
      'content-length',
      'X-Request-ID',
      'x-payment',
      'Proxy-Authorization',
      'X-Gateway-Model',
      'bad header',
      'a:b',
      '',
      null,
    ),
  },
  { weight: 1, arbitrary: wrongType },
);

const credentialFields = {
  name: field(
    fc.oneof(
      { weight: 4, arbitrary: fc.string({ minLength: 1, maxLength: 30 }) },
      { weight: 1, arbitrary: fc.constantFrom('dup-c', 'dup-d', ' dup-c') },
      { weight: 1, arbitrary: nastyString },
    ),
    6,
  ),
  auth_type: field(fc.constantFrom('bearer', 'api_key', 'none', 'basic', 'Bearer')),
  source: field(fc.constantFrom('managed', 'managed', 'vault', 'kms')),
  plaintext,
  vault_ref: vaultRef,
  header_name: headerName,
};

const credentialName = fc.oneof(
  { weight: 5, arbitrary: fc.string({ minLength: 1, maxLength: 40 }).filter((n) => n.trim().length > 0) },
  { weight: 1, arbitrary: fc.constantFrom('dup-c', 'dup-d', ' dup-c') },
);
const validVaultRef = fc.oneof(
  fc.constant('secret/data/tenants/{tenant}/agents/foo#token'),
  fc
    .stringMatching(/^[a-z0-9_]{1,10}(\/[a-z0-9_]{1,10}){0,2}#[a-z_]{1,8}$/)
    .map((rest) => `secret/data/tenants/{tenant}/${rest}`),
);
const validHeaderName = fc.oneof(
  fc.constantFrom('X-API-Key', 'X-Upstream-Token'),
  fc.stringMatching(/^X-[A-Za-z0-9]{1,12}$/),
);

/** A credential the create rules accept. */
const validCredential: fc.Arbitrary<Record<string, unknown>> = fc
  .constantFrom('bearer', 'api_key', 'none')
  .chain((auth) =>
    fc.constantFrom('managed', 'vault').chain((source) =>
      fc.record(
        {
          name: credentialName,
          auth_type: fc.constant(auth),
          source: fc.constant(source),
          ...((source === 'managed' ? { plaintext: printableSecret } : { vault_ref: validVaultRef }) as Record<
            string,
            fc.Arbitrary<string>
          >),
          ...((auth === 'api_key' ? { header_name: validHeaderName } : {}) as Record<string, fc.Arbitrary<string>>),
        } as Record<string, fc.Arbitrary<unknown>>,
        {
          requiredKeys: [
            'name',
            'auth_type',
            'source',
            ...(source === 'managed' && auth !== 'none' ? ['plaintext'] : []),
            ...(source === 'vault' ? ['vault_ref'] : []),
          ] as never[],
        },
      ),
    ),
  ) as fc.Arbitrary<Record<string, unknown>>;

/** The body with the caller's tenant id in place of `{tenant}` in its vault_ref. */
export function withTenant(body: unknown, tenant: string): unknown {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return body;
  const ref = (body as Record<string, unknown>).vault_ref;
  return typeof ref === 'string' ? { ...body, vault_ref: ref.replaceAll('{tenant}', tenant) } : body;
}

const CREDENTIAL_KEYS = ['name', 'auth_type', 'source', 'plaintext', 'vault_ref', 'header_name'];

export const credentialCreateBody = bodyMix(
  validCredential,
  looseRecord(credentialFields, ['name', 'auth_type', 'source']),
  CREDENTIAL_KEYS,
);

const maybeName = fc.option(credentialName, { nil: undefined });
const withName = (doc: Record<string, unknown>, name: unknown) => (name === undefined ? doc : { ...doc, name });

/** Updates the rules accept for a credential of this source (whatever its auth_type now). */
function validCredentialUpdate(source: 'managed' | 'vault'): fc.Arbitrary<Record<string, unknown>> {
  const shapes =
    source === 'managed'
      ? fc.oneof(
          fc.record({ plaintext: printableSecret }),
          fc.record({ auth_type: fc.constant('bearer'), plaintext: printableSecret }),
          fc.record({ auth_type: fc.constant('api_key'), plaintext: printableSecret, header_name: validHeaderName }),
          fc.constant({ auth_type: 'none' }),
          fc.constant({}),
        )
      : fc.oneof(
          fc.record({ vault_ref: validVaultRef }),
          fc.constant({ auth_type: 'bearer' }),
          fc.record({ auth_type: fc.constant('api_key'), header_name: fc.oneof(validHeaderName, fc.constant(null)) }),
          fc.constant({ auth_type: 'none' }),
          fc.constant({}),
        );
  return fc.tuple(shapes as fc.Arbitrary<Record<string, unknown>>, maybeName).map(([doc, name]) => withName(doc, name));
}

export const credentialPutBody = (source: 'managed' | 'vault') =>
  bodyMix(
    validCredentialUpdate(source),
    looseRecord({
      name: credentialFields.name,
      auth_type: credentialFields.auth_type,
      plaintext,
      vault_ref: vaultRef,
      header_name: headerName,
      source: fc.constantFrom('vault', 'managed'),
    }),
    ['name', 'auth_type', 'plaintext', 'vault_ref', 'header_name'],
  );

// ---------------------------------------------------------------- settlement configuration

export const settlementConfigBody = (refs: { pem: string; other: string[] }) =>
  bodyOf(
    looseRecord(
      {
        facilitator_url: fc.oneof(
          {
            weight: 4,
            arbitrary: fc.constantFrom(
              'https://facilitator.example.com',
              'https://facilitator.example.com:8443/base',
              'https://FACILITATOR.example.com./',
            ),
          },
          { weight: 2, arbitrary: fc.webUrl({ validSchemes: ['https'] }) },
          {
            weight: 2,
            arbitrary: fc.constantFrom(
              'http://facilitator.example.com',
              'https://10.0.0.5:8443',
              'https://localhost',
              'https://[::1]/',
              'https://example.com/?x=1',
              'https://example.com/#f',
              'https://',
              'not a url',
              'https://169.254.169.254',
            ),
          },
          { weight: 1, arbitrary: wrongType },
        ),
        facilitator_credential_ref: fc.oneof(
          { weight: 5, arbitrary: fc.constant(refs.pem) },
          { weight: 2, arbitrary: fc.constantFrom(...refs.other) },
          { weight: 1, arbitrary: idLike('cred') },
          { weight: 1, arbitrary: wrongType },
        ),
      },
      ['facilitator_url', 'facilitator_credential_ref'],
    ),
  );

// ---------------------------------------------------------------- policy

const action = field(fc.constantFrom('allow', 'warn', 'deny', 'Allow', 'block'), 6);
const count = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: 0, max: 1_000_000 }) },
  { weight: 1, arbitrary: fc.constantFrom(-1, 1.5, 2 ** 53, 1e300) },
  { weight: 1, arbitrary: wrongType },
);
const toolPattern = fc.oneof(
  fc.constantFrom('read_*', '*', 'search', 'a*b', '**', ''),
  fc.string({ maxLength: 12 }),
  wrongType,
);
const policyMatch = looseRecord({
  agents: field(fc.array(fc.oneof(idLike('agt'), nastyString), { maxLength: 4 })),
  tools: field(fc.array(toolPattern, { maxLength: 4 })),
  max_body_bytes: count,
  rate_per_min: count,
});
const policyRule = looseRecord({ action, match: field(policyMatch) }, ['action']);
const validAction = fc.constantFrom('allow', 'warn', 'deny');
const validMatch = fc.record(
  {
    agents: fc.array(
      fc.uuid({ version: 7 }).map((u) => `agt_${u}`),
      { maxLength: 3 },
    ),
    tools: fc.array(fc.oneof(fc.stringMatching(/^[a-z_]{1,10}\*?$/), fc.constant('*')), { maxLength: 3 }),
    max_body_bytes: fc.integer({ min: 0, max: 1 << 30 }),
    rate_per_min: fc.integer({ min: 0, max: 100_000 }),
  },
  { requiredKeys: [] },
);
const validRule = fc.record({ action: validAction, match: validMatch }, { requiredKeys: ['action'] });
const validPolicy = fc.record(
  { default: validAction, on_error: validAction, rules: fc.array(validRule, { maxLength: 5 }) },
  { requiredKeys: ['default', 'on_error'] },
) as fc.Arbitrary<Record<string, unknown>>;

export const policyDocument = bodyMix(
  validPolicy,
  looseRecord({ default: action, on_error: action, rules: field(fc.array(field(policyRule, 8), { maxLength: 6 })) }, [
    'default',
    'on_error',
  ]),
  ['default', 'on_error', 'rules'],
);

// ---------------------------------------------------------------- query strings

export type QueryPair = [string, string];

/** Encodes pairs as a query string; `raw` values go on the wire unencoded (malformed % escapes included). */
export function queryString(pairs: QueryPair[], raw = false): string {
  if (pairs.length === 0) return '';
  const enc = (s: string) => percentEncode(s, raw ? /[A-Za-z0-9%._~:+=-]/ : /[A-Za-z0-9._~-]/);
  return `?${pairs.map(([k, v]) => `${enc(k)}=${enc(v)}`).join('&')}`;
}

/**
 * Percent-encodes the UTF-8 bytes of `s` except the characters `keep` matches. Unlike
 * encodeURIComponent it never throws: a lone surrogate goes out as the bytes of U+FFFD.
 */
export function percentEncode(s: string, keep: RegExp = /[A-Za-z0-9._~-]/): string {
  let out = '';
  for (const byte of Buffer.from(s, 'utf8')) {
    const c = String.fromCharCode(byte);
    out += byte < 0x80 && keep.test(c) ? c : `%${byte.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** Query pairs for the named parameters: each value valid or nasty, sometimes repeated, sometimes an unknown key. */
export function queryPairs(
  params: Record<string, fc.Arbitrary<string>>,
): fc.Arbitrary<{ pairs: QueryPair[]; raw: boolean }> {
  const names = Object.keys(params);
  const pair: fc.Arbitrary<QueryPair> = fc.oneof(
    {
      weight: 6,
      arbitrary: fc
        .constantFrom(...names)
        .chain((n) =>
          fc.tuple(
            fc.constant(n),
            fc.oneof({ weight: 4, arbitrary: params[n] }, { weight: 1, arbitrary: nastyString }),
          ),
        ),
    },
    {
      weight: 1,
      arbitrary: fc.tuple(
        fc.oneof(fc.string({ maxLength: 8 }), fc.constantFrom('limit[]', 'status[0]', '__proto__', 'tenant_id')),
        nastyString,
      ),
    },
  );
  return fc.record({ pairs: fc.array(pair, { maxLength: 6 }), raw: fc.boolean() });
}

export const rfc3339 = (anchor: number): fc.Arbitrary<string> =>
  fc.oneof(
    {
      weight: 4,
      arbitrary: fc.integer({ min: -40 * 24 * 3600, max: 3600 }).map((s) => new Date(anchor + s * 1000).toISOString()),
    },
    {
      weight: 2,
      arbitrary: fc
        .date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('2200-01-01T00:00:00Z'), noInvalidDate: true })
        .map((d) => d.toISOString()),
    },
    {
      weight: 2,
      arbitrary: fc
        .integer({ min: -30 * 24 * 3600, max: 0 })
        .chain((s) =>
          fc.constantFrom(
            new Date(anchor + s * 1000).toISOString().replace('Z', '+00:00'),
            new Date(anchor + s * 1000).toISOString().replace('Z', '+05:30'),
            new Date(anchor + s * 1000).toISOString().replace('T', ' '),
            new Date(anchor + s * 1000).toISOString().replace('T', 't').replace('Z', 'z'),
            new Date(anchor + s * 1000).toISOString().slice(0, 19),
            new Date(anchor + s * 1000).toISOString().slice(0, 10),
          ),
        ),
    },
    {
      // The first and last days RFC 3339 can write, at any time and offset: many name an instant
      // before year 1 or after year 9999 once in UTC.
      weight: 1,
      arbitrary: fc
        .tuple(
          fc.constantFrom('0001-01-01', '9999-12-31'),
          fc.integer({ min: 0, max: 86_399 }),
          fc.integer({ min: -(23 * 60 + 59), max: 23 * 60 + 59 }),
        )
        .map(([day, s, offset]) => {
          const two = (n: number) => String(n).padStart(2, '0');
          const zone = `${offset < 0 ? '-' : '+'}${two(Math.floor(Math.abs(offset) / 60))}:${two(Math.abs(offset) % 60)}`;
          return `${day}T${two(Math.floor(s / 3600))}:${two(Math.floor(s / 60) % 60)}:${two(s % 60)}${zone}`;
        }),
    },
    {
      weight: 1,
      arbitrary: fc.constantFrom(
        '2024-02-30T00:00:00Z',
        '2023-12-31T23:59:60Z',
        '0000-01-01T00:00:00Z',
        '9999-12-31T23:59:59.999999999Z',
        '2024-01-01T24:00:00Z',
        '2024-13-01T00:00:00Z',
        '2024-01-01T00:00:00+24:00',
        '1e10',
        '-1',
        'now',
      ),
    },
  );

// ---------------------------------------------------------------- headers

const headerChar = fc
  .oneof(
    { weight: 20, arbitrary: fc.integer({ min: 0x20, max: 0x7e }) },
    { weight: 2, arbitrary: fc.integer({ min: 0x80, max: 0xff }) },
    { weight: 1, arbitrary: fc.constant(0x09) },
  )
  .map((c) => String.fromCharCode(c));

/** A header value undici will put on the wire (visible ASCII, space, tab and obs-text bytes). */
export const headerValue: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.string({ unit: headerChar, maxLength: 60 }) },
  {
    weight: 2,
    arbitrary: fc
      .tuple(fc.integer({ min: 240, max: 270 }), fc.constantFrom('m', 'é', ' ', '-'))
      .map(([n, c]) => c.repeat(n)),
  },
  {
    weight: 1,
    arbitrary: fc
      .tuple(fc.integer({ min: 120, max: 140 }), fc.constantFrom('é', 'ÿ'))
      .map(([n, c]) => `m${c.repeat(n)}`),
  },
  { weight: 1, arbitrary: fc.string({ unit: headerChar, minLength: 100, maxLength: 400 }) },
);

export const requestIdValue: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: fc.stringMatching(/^[A-Za-z0-9._:-]{1,40}$/) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      'a'.repeat(128),
      'a'.repeat(129),
      'a'.repeat(201),
      'req id',
      'req/id',
      'req\tid',
      '{"x":1}',
      '',
    ),
  },
  { weight: 2, arbitrary: headerValue },
);

/** The bytes a latin1 header string occupies on the wire, after the parser's trimming. */
export function wireBytes(value: string): number {
  return Buffer.byteLength(value.replace(/^[ \t]+|[ \t]+$/g, ''), 'latin1');
}
