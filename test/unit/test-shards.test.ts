// The order the integration suite's shards take files in (scripts/lib/shards.ts): the longest
// first by the recorded durations, so the last files handed out are short and the shards end
// together; every file is handed out exactly once, recorded or not.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { failedList, integrationFiles, longestFirst, nextFor } from '../../scripts/lib/shards.ts';

describe('the test shards: which file next', () => {
  it('hands out the longest recorded files first, unknown ones as about the median, ties by name', () => {
    const durations = { 'test/a.test.ts': 3, 'test/b.test.ts': 120, 'test/c.test.ts': 40 };
    const files = ['test/c.test.ts', 'test/new.test.ts', 'test/a.test.ts', 'test/b.test.ts', 'test/also-new.test.ts'];
    assert.deepEqual(longestFirst(files, durations), [
      'test/b.test.ts',
      'test/c.test.ts',
      'test/also-new.test.ts',
      'test/new.test.ts',
      'test/a.test.ts',
    ]);
  });

  it('keeps every file once and changes nothing it is given', () => {
    const files = ['test/x.test.ts', 'test/y.test.ts', 'test/z.test.ts'];
    const ordered = longestFirst(files, { 'test/z.test.ts': 9 });
    assert.deepEqual([...ordered].sort(), files);
    assert.deepEqual(files, ['test/x.test.ts', 'test/y.test.ts', 'test/z.test.ts']);
  });

  it('the suite is every test file in the area folders, none of the unit or workflow layers', () => {
    const files = integrationFiles(['test/unit/', 'test/workflows/']);
    assert.ok(files.includes('test/proxy/proxy.test.ts'), 'a file one folder down is found');
    assert.ok(files.length > 50, `${files.length} files`);
    for (const file of files) assert.match(file, /^test\/(?!unit\/|workflows\/)[^/]+\/[^/]+\.test\.ts$/);
  });

  it('the recorded durations name only test files that exist, each with a number of seconds', () => {
    const recorded = JSON.parse(readFileSync('test/durations.json', 'utf8')) as Record<string, unknown>;
    for (const [file, seconds] of Object.entries(recorded)) {
      assert.match(file, /^test\/[^/]+\/[^/]+\.test\.ts$/, 'a file of an area folder (test/AREA/NAME.test.ts)');
      assert.ok(!file.startsWith('test/unit/') && !file.startsWith('test/workflows/'), `${file}: not a shard's file`);
      assert.doesNotThrow(() => readFileSync(file), `${file} is listed in test/durations.json but missing`);
      assert.equal(typeof seconds, 'number');
    }
  });

  it('the deployment guide goes to the first shard only (the local server and its pg_dump); the others take the rest in order', () => {
    const guide = 'test/operations/deployment-guide.test.ts';
    assert.ok(existsSync(guide), `${guide} moved: scripts/lib/shards.ts names it`);
    const queue = [guide, 'test/b.test.ts', 'test/c.test.ts'];
    assert.equal(nextFor(2, queue), 'test/b.test.ts');
    assert.equal(nextFor(3, queue), 'test/c.test.ts');
    assert.equal(nextFor(2, queue), undefined, 'nothing left that shard 2 may run: it stops');
    assert.deepEqual(queue, [guide]);
    assert.equal(nextFor(1, queue), guide);
    assert.deepEqual(queue, []);
  });

  it('lists every failed test again at the end, by file, and nothing when all passed', () => {
    const passed = { passes: 3, failures: 0, pending: 0, wallMs: 1, cpuMs: 1, failed: [] };
    assert.equal(failedList([{ file: 'test/a.test.ts', ...passed }]), '');
    const list = failedList([
      { file: 'test/a.test.ts', ...passed },
      { ...passed, file: 'test/b.test.ts', failures: 2, failed: ['b one: boom', 'b two: bang'] },
      { ...passed, file: 'test/c.test.ts', failures: 1, failed: undefined },
    ]);
    assert.equal(list, '\nfailed:\n  test/b.test.ts (2)\n    b one: boom\n    b two: bang\n  test/c.test.ts (1)\n');
  });
});
