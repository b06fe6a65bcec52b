// An API told to stop (SIGTERM, as a supervisor or a rolling update sends it) takes no new
// connection but lets the calls in hand finish: a stream it is piping reaches its caller whole
// and is recorded succeeded, not cut and recorded lost.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { request } from 'undici';
import { stack } from '../support/stack.ts';
import { createAgent, rawUpstream, readAll, waitForRow } from '../support/proxy-helpers.ts';
import { startApiProcess } from '../support/api-process.ts';
import { exited } from '../support/worker-process.ts';
import { waitFor } from '../support/wait.ts';

describe('an API stopped with SIGTERM', function () {
  this.timeout(60_000);
  let api: ChildProcess | undefined;
  after(() => {
    if (api && api.exitCode === null) api.kill('SIGKILL');
  });

  it('finishes the stream it is piping, refuses new connections, then exits 0', async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let arrived!: () => void;
    const atUpstream = new Promise<void>((r) => (arrived = r));
    const up = await rawUpstream((req, res) => {
      void readAll(req).then(async () => {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('first half, ');
        arrived();
        await held;
        res.end('second half after the stop');
      });
    }, '/');
    try {
      const started = await startApiProcess({ API_SHUTDOWN_GRACE_MS: '20000' });
      api = started.child;
      const token = await stack().token(`tenant-stop-${randomUUID()}`);
      const agent = await createAgent(token, { upstream_url: up.url });
      const res = await request(`${started.url}/v1/proxy/${agent}/stream`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}` },
        body: 'stream me',
      });
      assert.equal(res.statusCode, 200);
      const id = res.headers['x-gateway-invocation-id'] as string;
      const body = res.body.text();
      await atUpstream;

      const code = new Promise<number | null>((r) => api!.once('exit', r));
      api.kill('SIGTERM');
      // Once it has taken the signal it takes no new connection, but still runs for its stream.
      await waitFor(
        () =>
          request(`${started.url}/healthz`).then(
            async (res) => (await res.body.dump(), false),
            (err: NodeJS.ErrnoException) => err.code === 'ECONNREFUSED',
          ),
        { what: 'the stopping API to refuse new connections' },
      );
      assert.equal(api.exitCode, null, 'still running while its stream is open');
      release();
      assert.equal(await body, 'first half, second half after the stop');
      await exited(api);
      assert.equal(await code, 0);
      const row = await waitForRow(id);
      assert.equal(row.status, 'succeeded', `recorded ${row.status} (${row.errorClass})`);
    } finally {
      await up.close();
    }
  });
});
