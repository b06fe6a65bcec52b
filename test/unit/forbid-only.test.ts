// A `.only` left in a test file runs that test alone and reports the file green, the rest of it
// never run. Every layer refuses one: each mocha config (the unit and workflow layers', the
// integration suite's for `npm test -- FILE` and `npm run mocha`) and the shards' own mocha runs
// (test/support/shard.ts, options from scripts/lib/shards.ts). Each is run on a file of its own
// that holds an `it.only`, and must fail on it.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const FORBIDDEN = /`\.only` forbidden/;

describe('a stray .only fails every layer', function () {
  // Each case is a node process loading mocha (the integration config also its root hook's modules).
  this.timeout(60_000);
  let dir: string;
  let file: string;

  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'forbid-only-'));
    file = join(dir, 'stray-only.test.ts');
    // Spelled in pieces, so no scan of this repository for a stray `.only` takes the plant for one.
    const only = ['it', 'only'].join('.');
    writeFileSync(file, `${only}('runs alone', () => {});\nit('is skipped by the only', () => {});\n`);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  /** mocha with `args` on the planted file: its exit status and what it wrote. */
  const mocha = (...args: string[]) => {
    const run = spawnSync(process.execPath, ['node_modules/.bin/mocha', ...args, file], {
      encoding: 'utf8',
      env: { ...process.env, MOCHA_SUMMARY_FILE: join(dir, 'counts.json') },
    });
    return { status: run.status, output: `${run.stdout}${run.stderr}` };
  };

  for (const config of ['test/unit/.mocharc.json', 'test/workflows/.mocharc.json']) {
    it(`${config} refuses it`, () => {
      const { status, output } = mocha('--config', config);
      assert.notEqual(status, 0, output);
      assert.match(output, FORBIDDEN);
    });
  }

  it('.mocharc.json (the integration suite) refuses it', () => {
    // --dry-run: no root hook runs, so no stack starts, whatever the config says about `.only`;
    // the refusal comes as the file loads, before any hook.
    const { status, output } = mocha('--config', '.mocharc.json', '--dry-run');
    assert.notEqual(status, 0, output);
    assert.match(output, FORBIDDEN);
  });

  it("a shard's mocha run refuses it", () => {
    // The shard's own construction, in a process of its own (a second Mocha here would take over
    // this run's globals).
    const script = `
      import Mocha from 'mocha';
      import { suiteOptions } from './scripts/lib/shards.ts';
      const mocha = new Mocha({ ...suiteOptions(), reporter: 'dot' });
      mocha.addFile(${JSON.stringify(file)});
      await mocha.loadFilesAsync().then(
        () => console.log('loaded'),
        (err) => { console.log(err.message); process.exitCode = 1; },
      );`;
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    const output = `${run.stdout}${run.stderr}`;
    assert.equal(run.status, 1, output);
    assert.match(output, FORBIDDEN);
  });
});
