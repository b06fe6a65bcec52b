// The project's layers, checked by `npm test` (scripts/test.ts runs dependency-cruiser with this
// file). From the ground up: lib/ → x402/ → the domains gateway/ and facilitator/ → activities/,
// workflows/ → temporal/ → the doors api/ and facilitator-service/ → scripts/, bench/, test/.
// Imports only go down; docs/ARCHITECTURE.md explains each folder, one rule per row of its table.
const PRODUCTION = '^(lib|x402|gateway|facilitator|activities|workflows|temporal|api|facilitator-service|contracts)/';
/** The two doors: the processes' HTTP fronts, which only scripts, benchmarks and tests import. */
const DOORS = '^(api|facilitator-service)/';

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
      to: {
        path: '^(x402|gateway|facilitator|activities|workflows|temporal|api|facilitator-service|contracts|scripts|bench|test)/',
      },
    },
    {
      name: 'x402-is-pure-protocol',
      comment: 'x402/ is the protocol: it imports only lib/.',
      severity: 'error',
      from: { path: '^x402/' },
      to: {
        path: '^(gateway|facilitator|activities|workflows|temporal|api|facilitator-service|contracts|scripts|bench|test)/',
      },
    },
    {
      name: 'gateway-domain-below-the-doors',
      comment:
        'The gateway domain imports only lib/, x402/ and the contract descriptions (token, Permit2, upto proxy, batch settlement); never the facilitator; no Koa.',
      severity: 'error',
      from: { path: '^gateway/' },
      to: {
        path: '^(facilitator|activities|workflows|temporal|api|facilitator-service|scripts|bench|test)/|^contracts/(?!(token|permit2|upto-proxy|batch-settlement)\\.ts$)|^node_modules/(koa|@koa)/',
      },
    },
    {
      name: 'facilitator-domain-below-the-doors',
      comment:
        'The facilitator domain imports only lib/, x402/ and the contract descriptions (token, Permit2, upto proxy, batch settlement); never the gateway, Temporal or its own service; no Koa.',
      severity: 'error',
      from: { path: '^facilitator/' },
      to: {
        path: '^(gateway|activities|workflows|temporal|api|facilitator-service|scripts|bench|test)/|^contracts/(?!(token|permit2|upto-proxy|batch-settlement)\\.ts$)|^node_modules/(koa|@koa)/',
      },
    },
    {
      name: 'activities-are-adapters',
      comment: 'activities/ adapt the domains to Temporal: never a door, never Koa.',
      severity: 'error',
      from: { path: '^activities/' },
      to: {
        path: '^(api|facilitator-service|temporal|workflows/(?!.*types)|scripts|bench|test)/|^node_modules/(koa|@koa)/',
      },
    },
    {
      name: 'workflows-stay-deterministic',
      comment: 'workflows/ import @temporalio/workflow, one another, types and the search-attribute definitions only.',
      severity: 'error',
      from: { path: '^workflows/' },
      to: {
        path: '^(lib|x402|gateway|facilitator|api|facilitator-service|scripts|bench|test)/|^activities/(?!.*types\\.ts$)',
        dependencyTypesNot: ['type-only'],
      },
    },
    {
      name: 'temporal-below-the-doors',
      comment: 'temporal/ wires workers and clients over the floors below: it never imports a door.',
      severity: 'error',
      from: { path: '^temporal/' },
      to: { path: DOORS },
    },
    {
      name: 'api-does-not-reach-into-the-facilitator',
      comment: 'api/ never imports the facilitator, its domain or its service: the protocol both use is in x402/.',
      severity: 'error',
      from: { path: '^api/' },
      to: { path: '^(facilitator|facilitator-service)/' },
    },
    {
      name: 'api-holds-no-storage',
      comment:
        "api/ is a door: no ORM and no database driver, type-only imports included; the storage is the domain's (gateway/), which the door calls.",
      severity: 'error',
      from: { path: '^api/' },
      // Resolved under node_modules (wherever it is linked from), or unresolved by its bare name.
      to: { path: '(^|/)node_modules/(@mikro-orm|pg)/|^(@mikro-orm/|pg$)' },
    },
    {
      name: 'facilitator-is-its-own-service',
      comment: 'facilitator-service/ never imports the gateway: neither api/ nor the gateway domain.',
      severity: 'error',
      from: { path: '^facilitator-service/' },
      to: { path: '^(api|gateway)/' },
    },
    {
      name: 'examples-stand-alone',
      comment:
        'examples/ are scripts a user copies: they import published packages and each other, nothing of the project.',
      severity: 'error',
      from: { path: '^examples/' },
      to: {
        path: '^(lib|x402|gateway|facilitator|activities|workflows|temporal|api|facilitator-service|contracts|scripts|bench|test)/',
      },
    },
    {
      name: 'console-is-a-browser-bundle',
      comment:
        'console/ is the web console, bundled for the browser: it imports its packages (Preact, uPlot) and its own files, nothing of the project; it reads the gateway through /v1 only.',
      severity: 'error',
      from: { path: '^console/' },
      to: {
        path: '^(lib|x402|gateway|facilitator|activities|workflows|temporal|api|facilitator-service|contracts|scripts|bench|examples|test)/',
      },
    },
    {
      name: 'nothing-imports-the-console',
      comment: "The API serves the console's build from a folder (CONSOLE_DIR); no code imports console/.",
      severity: 'error',
      from: { pathNot: '^console/' },
      to: { path: '^console/' },
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
    enhancedResolveOptions: { extensions: ['.ts', '.tsx', '.js', '.cjs', '.mjs', '.json'] },
  },
};
