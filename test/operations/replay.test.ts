// Committed JSON histories must replay against today's workflow code without
// non-determinism. Regenerate one with: temporal workflow show -w ID -o json > test/histories/NAME.json
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { Worker } from '@temporalio/worker';
import { stack } from '../support/stack.ts';

const dir = new URL('../histories/', import.meta.url);

describe('workflow replay', () => {
  const files = readdirSync(dir).filter((f) => f.endsWith('.json'));

  it('has committed histories to replay', () => {
    assert.ok(files.length > 0);
  });

  for (const file of files) {
    it(`replays ${file} deterministically`, async () => {
      const history = JSON.parse(readFileSync(new URL(file, dir), 'utf8'));
      await Worker.runReplayHistory({ workflowBundle: stack().workflowBundle }, history, file);
    });
  }
});
