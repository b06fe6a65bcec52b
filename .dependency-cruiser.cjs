// The project's layers, checked by `npm test` (scripts/check-layers.ts runs dependency-cruiser
// with this file). From the ground up: lib/ → x402/ → gateway/ → activities/, workflows/ →
// temporal/ → the front doors api/ and facilitator/ → scripts/, bench/, test/. Imports only go
// down; docs/ARCHITECTURE.md explains each folder.
const PRODUCTION = '^(lib|x402|gateway|activities|workflows|temporal|api|facilitator|contracts)/';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-cycles',
      comment: 'No import cycle, type-only imports included.',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
    {
      name: 'lib-is-the-ground',
      comment: 'lib/ is process infrastructure: it imports nothing of the project.',
      severity: 'error',
      from: { path: '^lib/' },
      to: { path: '^(x402|gateway|activities|workflows|temporal|api|facilitator|contracts|scripts|bench|test)/' },
    },
    {
      name: 'x402-is-pure-protocol',
      comment: 'x402/ is the protocol: it imports only lib/.',
      severity: 'error',
      from: { path: '^x402/' },
      to: { path: '^(gateway|activities|workflows|temporal|api|facilitator|contracts|scripts|bench|test)/' },
    },
    {
      name: 'gateway-domain-below-the-doors',
      comment: 'The gateway domain imports only lib/, x402/ and the token contract description; no Koa.',
      severity: 'error',
      from: { path: '^gateway/' },
      to: { path: '^(activities|workflows|temporal|api|facilitator|scripts|bench|test)/|^node_modules/(koa|@koa)/' },
    },
    {
      name: 'activities-are-adapters',
      comment: 'activities/ adapt the domain to Temporal: never the Koa app, never Koa.',
      severity: 'error',
      from: { path: '^activities/' },
      to: { path: '^(api|temporal|workflows/(?!.*types)|scripts|bench|test)/|^node_modules/(koa|@koa)/' },
    },
    {
      name: 'workflows-stay-deterministic',
      comment: 'workflows/ import @temporalio/workflow, one another, types and the search-attribute definitions only.',
      severity: 'error',
      from: { path: '^workflows/' },
      to: {
        path: '^(lib|x402|gateway|api|facilitator|scripts|bench|test)/|^activities/(?!.*types\\.ts$)',
        dependencyTypesNot: ['type-only'],
      },
    },
    {
      name: 'api-does-not-reach-into-the-facilitator',
      comment: 'api/ never imports facilitator/: the protocol both use is in x402/.',
      severity: 'error',
      from: { path: '^api/' },
      to: { path: '^facilitator/' },
    },
    {
      name: 'facilitator-is-its-own-service',
      comment: 'facilitator/ never imports the gateway: neither api/ nor the gateway domain.',
      severity: 'error',
      from: { path: '^facilitator/' },
      to: { path: '^(api|gateway)/' },
    },
    {
      name: 'examples-stand-alone',
      comment:
        'examples/ are scripts a user copies: they import published packages and each other, nothing of the project.',
      severity: 'error',
      from: { path: '^examples/' },
      to: { path: '^(lib|x402|gateway|activities|workflows|temporal|api|facilitator|contracts|scripts|bench|test)/' },
    },
    {
      name: 'production-never-imports-dev-material',
      comment: 'No production file imports scripts/, bench/, test/ or a dev-only module.',
      severity: 'error',
      from: { path: PRODUCTION, pathNot: '/dev/' },
      to: { path: '^(scripts|bench|test)/|/dev/' },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: '^(node_modules|\\.tools|\\.data|\\.test-data)/' },
    tsConfig: { fileName: 'tsconfig.json' },
    tsPreCompilationDeps: true,
    enhancedResolveOptions: { extensions: ['.ts', '.js', '.cjs', '.mjs', '.json'] },
  },
};
