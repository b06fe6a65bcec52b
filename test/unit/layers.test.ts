// The layer rules (.dependency-cruiser.cjs) catch what they are meant to: a planted tree with
// one violation of each rule fails the check, naming every rule, and the same tree without the
// violations passes. `npm test` runs the check on the project itself before the suite.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';

const CONFIG = resolve('.dependency-cruiser.cjs');
const DEPCRUISE = resolve('node_modules/.bin/depcruise');

function cruise(files: Record<string, string>): { status: number | null; output: string } {
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
    const folders = [...new Set(Object.keys(files).map((p) => p.split('/')[0]))];
    const run = spawnSync(DEPCRUISE, ['--config', CONFIG, '--output-type', 'err', ...folders], {
      cwd: dir,
      encoding: 'utf8',
    });
    return { status: run.status, output: `${run.stdout}${run.stderr}` };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A small tree that keeps every rule. */
const LAWFUL: Record<string, string> = {
  'lib/log.ts': 'export const log = 1;\n',
  'x402/schemas.ts': "import { log } from '../lib/log.ts';\nexport const schema = log;\n",
  'gateway/claims.ts': "import { schema } from '../x402/schemas.ts';\nexport const claims = schema;\n",
  'activities/invocation.ts': "import { claims } from '../gateway/claims.ts';\nexport const act = claims;\n",
  'workflows/invocation.ts': "import type { act } from '../activities/invocation.ts';\nexport type W = typeof act;\n",
  'temporal/worker.ts': "import { act } from '../activities/invocation.ts';\nexport const worker = act;\n",
  'api/app.ts':
    "import { claims } from '../gateway/claims.ts';\nimport { worker } from '../temporal/worker.ts';\nexport const app = claims + worker;\n",
  'facilitator/app.ts': "import { schema } from '../x402/schemas.ts';\nexport const fac = schema;\n",
  'scripts/dev/chain.ts': "import { fac } from '../../facilitator/app.ts';\nexport const chain = fac;\n",
};

describe('layer rules', function () {
  this.timeout(60_000);

  it('pass on a tree that keeps them', () => {
    const { status, output } = cruise(LAWFUL);
    assert.equal(status, 0, output);
  });

  it('fail on each planted violation, naming its rule', () => {
    const { status, output } = cruise({
      ...LAWFUL,
      'lib/bad.ts': "import { app } from '../api/app.ts';\nexport const bad = app;\n",
      'x402/bad.ts': "import { claims } from '../gateway/claims.ts';\nexport const bad = claims;\n",
      'gateway/bad.ts': "import { app } from '../api/app.ts';\nexport const bad = app;\n",
      'activities/bad.ts': "import { app } from '../api/app.ts';\nexport const bad = app;\n",
      'workflows/bad.ts': "import { claims } from '../gateway/claims.ts';\nexport const bad = claims;\n",
      'api/bad.ts': "import { fac } from '../facilitator/app.ts';\nexport const bad = fac;\n",
      'facilitator/bad.ts': "import { claims } from '../gateway/claims.ts';\nexport const bad = claims;\n",
      'temporal/bad.ts': "import { chain } from '../scripts/dev/chain.ts';\nexport const bad = chain;\n",
      'api/cycle-a.ts': "import type { B } from './cycle-b.ts';\nexport type A = B | 1;\n",
      'api/cycle-b.ts': "import type { A } from './cycle-a.ts';\nexport type B = A | 2;\n",
    });
    assert.notEqual(status, 0);
    for (const rule of [
      'lib-is-the-ground',
      'x402-is-pure-protocol',
      'gateway-domain-below-the-doors',
      'activities-are-adapters',
      'workflows-stay-deterministic',
      'api-does-not-reach-into-the-facilitator',
      'facilitator-is-its-own-service',
      'production-never-imports-dev-material',
      'no-cycles',
    ]) {
      assert.match(output, new RegExp(rule), `${rule} is reported:\n${output}`);
    }
  });
});
