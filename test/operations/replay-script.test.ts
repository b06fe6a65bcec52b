// `npm run replay` (scripts/replay.ts) replays the committed histories of both workers, each
// against the bundle of the worker that runs its workflow type, and fails on one that is not
// a history of a known workflow. A file that is no history at all (what `*.json` also takes in
// a project folder) is skipped, with a line that says so, and fails nothing.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readdirSync, writeFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

function replay(files: string[]): Promise<{ code: number; stdout: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['scripts/replay.ts', ...files], { timeout: 120_000 }, (err, stdout) => {
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout });
    });
  });
}

describe('npm run replay', function () {
  this.timeout(180_000);

  it('replays gateway and facilitator histories, each against its own worker bundle', async () => {
    const gateway = readdirSync('test/histories')
      .filter((f) => f.endsWith('.json'))
      .map((f) => join('test/histories', f));
    const facilitator = readdirSync('test/histories/facilitator')
      .filter((f) => f.endsWith('.json'))
      .map((f) => join('test/histories/facilitator', f));
    assert.ok(gateway.length > 0 && facilitator.length > 0);
    const { code, stdout } = await replay([...gateway, ...facilitator]);
    assert.equal(code, 0, stdout);
    // One line per history, nothing else (the SDK's worker logs only with --verbose).
    assert.equal(stdout.trim().split('\n').length, gateway.length + facilitator.length, stdout);
    for (const file of gateway) assert.match(stdout, new RegExp(`^ok +${file} \\(\\w+, gateway\\)$`, 'm'));
    for (const file of facilitator)
      assert.match(stdout, new RegExp(`^ok +${file} \\(Settlement\\w*, facilitator\\)$`, 'm'));
  });

  it('fails, naming the file, on a history of no known workflow type', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'replay-'));
    const file = join(dir, 'unknown.json');
    writeFileSync(
      file,
      JSON.stringify({
        events: [
          {
            eventId: '1',
            eventType: 'EVENT_TYPE_WORKFLOW_EXECUTION_STARTED',
            workflowExecutionStartedEventAttributes: { workflowType: { name: 'NoSuchWorkflow' } },
          },
        ],
      }),
    );
    const { code, stdout } = await replay([file]);
    assert.equal(code, 1);
    assert.match(stdout, new RegExp(`^FAILED +${file}: no worker runs workflow type NoSuchWorkflow`, 'm'));
  });

  it('skips, with a line of its own, files that are not histories (package.json, tsconfig.json, not JSON)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'replay-'));
    const notJson = join(dir, 'notes.json');
    writeFileSync(notJson, 'not json');
    const history = join(
      'test/histories',
      readdirSync('test/histories').find((f) => f.endsWith('.json'))!,
    );
    const { code, stdout } = await replay(['package.json', 'tsconfig.json', notJson, history]);
    assert.equal(code, 0, stdout);
    assert.doesNotMatch(stdout, /FAILED/);
    assert.match(stdout, /^skipped package\.json: not a workflow history \(no workflow start event\)$/m);
    assert.match(stdout, /^skipped tsconfig\.json: not a workflow history/m);
    assert.match(stdout, new RegExp(`^skipped ${notJson}: not a workflow history \\(not JSON\\)$`, 'm'));
    assert.match(stdout, new RegExp(`^ok +${history} `, 'm'));
  });

  it('exits 2 when no file is a history: nothing was checked', async () => {
    const { code, stdout } = await replay(['package.json', 'package-lock.json']);
    assert.equal(code, 2, stdout);
    assert.doesNotMatch(stdout, /FAILED/);
    assert.equal(stdout.trim().split('\n').length, 2, stdout);
  });
});
