// The layer rules (.dependency-cruiser.cjs) catch what they are meant to: a planted tree with
// one violation of each rule fails the check, each violation reported under its rule, and the
// same tree without the violations passes. `npm test` runs the check on the project itself
// before the suite. Beside the rules: no two folders import each other (A → B and B → A), a
// tie the rules would let through between floors that may import anything (scripts/, bench/, test/).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';

const CONFIG = resolve('.dependency-cruiser.cjs');
const DEPCRUISE = resolve('node_modules/.bin/depcruise');
/** Every folder of code in the project, as `npm test` cruises it (scripts/test.ts). */
const PROJECT_FOLDERS = [
  'lib',
  'x402',
  'gateway',
  'facilitator',
  'activities',
  'workflows',
  'temporal',
  'api',
  'facilitator-service',
  'contracts',
  'scripts',
  'bench',
  'examples',
  'console',
  'test',
];

function depcruise(cwd: string, folders: string[], outputType: 'err' | 'json') {
  return spawnSync(DEPCRUISE, ['--config', CONFIG, '--output-type', outputType, ...folders], {
    cwd,
    encoding: 'utf8',
    maxBuffer: 256 * 1024 * 1024,
  });
}

function inTree<T>(files: Record<string, string>, use: (dir: string, folders: string[]) => T): T {
  const dir = mkdtempSync(join(tmpdir(), 'layers-'));
  try {
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({ compilerOptions: { module: 'nodenext', allowImportingTsExtensions: true, noEmit: true } }),
    );
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(dirname(join(dir, path)), { recursive: true });
      writeFileSync(join(dir, path), text);
    }
    return use(dir, [...new Set(Object.keys(files).map((p) => p.split('/')[0]))]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function cruise(files: Record<string, string>): { status: number | null; output: string } {
  return inTree(files, (dir, folders) => {
    const run = depcruise(dir, folders, 'err');
    return { status: run.status, output: `${run.stdout}${run.stderr}` };
  });
}

interface CruiseResult {
  modules: { source: string; dependencies: { resolved: string; coreModule: boolean; couldNotResolve: boolean }[] }[];
}

/** The pairs of top-level folders that import each other, each pair once, sorted. */
function foldersTiedBothWays(cwd: string, folders: string[]): string[][] {
  const run = depcruise(cwd, folders, 'json');
  assert.equal(run.status, 0, run.stderr);
  const edges = new Set<string>();
  for (const module of (JSON.parse(run.stdout) as CruiseResult).modules) {
    const from = module.source.split('/')[0];
    for (const dep of module.dependencies) {
      if (dep.coreModule || dep.couldNotResolve) continue;
      const to = dep.resolved.split('/')[0];
      if (to !== from && folders.includes(to)) edges.add(`${from} ${to}`);
    }
  }
  return [...edges]
    .map((edge) => edge.split(' '))
    .filter(([from, to]) => from < to && edges.has(`${to} ${from}`))
    .sort();
}

/** A small tree that keeps every rule. */
const LAWFUL: Record<string, string> = {
  'lib/log.ts': 'export const log = 1;\n',
  'x402/schemas.ts': "import { log } from '../lib/log.ts';\nexport const schema = log;\n",
  'gateway/claims.ts': "import { schema } from '../x402/schemas.ts';\nexport const claims = schema;\n",
  'facilitator/steps.ts': "import { schema } from '../x402/schemas.ts';\nexport const steps = schema;\n",
  'activities/invocation.ts':
    "import { claims } from '../gateway/claims.ts';\nimport { steps } from '../facilitator/steps.ts';\nexport const act = claims + steps;\n",
  'workflows/invocation.ts': "import type { act } from '../activities/invocation.ts';\nexport type W = typeof act;\n",
  'temporal/worker.ts':
    "import { act } from '../activities/invocation.ts';\nimport { steps } from '../facilitator/steps.ts';\nexport const worker = act + steps;\n",
  'api/app.ts':
    "import { claims } from '../gateway/claims.ts';\nimport { worker } from '../temporal/worker.ts';\nexport const app = claims + worker;\n",
  'facilitator-service/app.ts':
    "import { steps } from '../facilitator/steps.ts';\nimport { worker } from '../temporal/worker.ts';\nexport const fac = steps + worker;\n",
  'scripts/dev/chain.ts': "import { fac } from '../../facilitator-service/app.ts';\nexport const chain = fac;\n",
  'examples/pay.ts': "import { readFileSync } from 'node:fs';\nexport const pay = readFileSync;\n",
  'console/src/format.ts': 'export const usdc = 1;\n',
  'console/src/main.ts': "import { usdc } from './format.ts';\nexport const main = usdc;\n",
};

/** One violation of each rule: the planted file, what it imports, the rule that must name it. */
const VIOLATIONS: { file: string; text: string; rule: string }[] = [
  { file: 'lib/bad.ts', text: "import { app } from '../api/app.ts';", rule: 'lib-is-the-ground' },
  { file: 'x402/bad.ts', text: "import { claims } from '../gateway/claims.ts';", rule: 'x402-is-pure-protocol' },
  { file: 'gateway/bad.ts', text: "import { app } from '../api/app.ts';", rule: 'gateway-domain-below-the-doors' },
  {
    file: 'gateway/bad-facilitator.ts',
    text: "import { steps } from '../facilitator/steps.ts';",
    rule: 'gateway-domain-below-the-doors',
  },
  {
    file: 'facilitator/bad.ts',
    text: "import { worker } from '../temporal/worker.ts';",
    rule: 'facilitator-domain-below-the-doors',
  },
  {
    file: 'facilitator/bad-gateway.ts',
    text: "import { claims } from '../gateway/claims.ts';",
    rule: 'facilitator-domain-below-the-doors',
  },
  { file: 'activities/bad.ts', text: "import { app } from '../api/app.ts';", rule: 'activities-are-adapters' },
  {
    file: 'workflows/bad.ts',
    text: "import { claims } from '../gateway/claims.ts';",
    rule: 'workflows-stay-deterministic',
  },
  {
    file: 'temporal/bad.ts',
    text: "import { fac } from '../facilitator-service/app.ts';",
    rule: 'temporal-below-the-doors',
  },
  {
    file: 'api/bad.ts',
    text: "import { fac } from '../facilitator-service/app.ts';",
    rule: 'api-does-not-reach-into-the-facilitator',
  },
  {
    file: 'api/bad-domain.ts',
    text: "import { steps } from '../facilitator/steps.ts';",
    rule: 'api-does-not-reach-into-the-facilitator',
  },
  {
    file: 'api/bad-orm.ts',
    text: "import type { EntityManager } from '@mikro-orm/postgresql';\nexport type Em = EntityManager;",
    rule: 'api-holds-no-storage',
  },
  { file: 'api/bad-pg.ts', text: "import pg from 'pg';\nexport const Pool = pg.Pool;", rule: 'api-holds-no-storage' },
  {
    file: 'facilitator-service/bad.ts',
    text: "import { claims } from '../gateway/claims.ts';",
    rule: 'facilitator-is-its-own-service',
  },
  { file: 'examples/bad.ts', text: "import { log } from '../lib/log.ts';", rule: 'examples-stand-alone' },
  {
    file: 'console/bad.ts',
    text: "import { claims } from '../gateway/claims.ts';",
    rule: 'console-is-a-browser-bundle',
  },
  {
    file: 'api/bad-console.ts',
    text: "import { usdc } from '../console/src/format.ts';",
    rule: 'nothing-imports-the-console',
  },
  {
    file: 'facilitator-service/bad-dev.ts',
    text: "import { chain } from '../scripts/dev/chain.ts';",
    rule: 'production-never-imports-dev-material',
  },
  { file: 'api/cycle-a.ts', text: "import type { B } from './cycle-b.ts';\nexport type A = B | 1;", rule: 'no-cycles' },
];

describe('layer rules', function () {
  this.timeout(60_000);

  it('pass on a tree that keeps them', () => {
    const { status, output } = cruise(LAWFUL);
    assert.equal(status, 0, output);
  });

  it('report each planted violation under its rule, and every rule has one planted', () => {
    const planted = Object.fromEntries(VIOLATIONS.map((v) => [v.file, `${v.text}\nexport const bad = 1;\n`]));
    // The other half of the planted cycle (reported once, from its first file).
    planted['api/cycle-b.ts'] = "import type { A } from './cycle-a.ts';\nexport type B = A | 2;\n";
    const { status, output } = cruise({ ...LAWFUL, ...planted });
    assert.notEqual(status, 0);
    for (const { file, rule } of VIOLATIONS) {
      assert.match(output, new RegExp(`error ${rule}: ${file} →`), `${file} is reported under ${rule}:\n${output}`);
    }
    const rules = (createRequire(import.meta.url)(CONFIG) as { forbidden: { name: string }[] }).forbidden;
    const unplanted = rules.map((r) => r.name).filter((name) => !VIOLATIONS.some((v) => v.rule === name));
    assert.deepEqual(unplanted, [], 'a rule without a planted violation');
  });
});

describe('no two folders import each other', function () {
  this.timeout(120_000);

  it('reports a tie the layer rules allow (scripts/ and bench/ both ways)', () => {
    const tied = inTree(
      {
        ...LAWFUL,
        'bench/tie.ts': "import { chain } from '../scripts/dev/chain.ts';\nexport const tie = chain;\n",
        'scripts/tie.ts': "import { tie } from '../bench/tie.ts';\nexport const back = tie;\n",
      },
      foldersTiedBothWays,
    );
    assert.deepEqual(tied, [['bench', 'scripts']]);
    assert.deepEqual(inTree(LAWFUL, foldersTiedBothWays), []);
  });

  it('holds for the project', () => {
    assert.deepEqual(foldersTiedBothWays(resolve('.'), PROJECT_FOLDERS), []);
  });
});
