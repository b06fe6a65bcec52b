// An unhandled error is logged by its kind and where it was thrown, never by its message: a
// database error quotes the value it refused (`invalid input syntax for type integer: "…"`),
// and that value can be something a caller sent. The answer is the v1 contract's bodiless 500.
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import Koa from 'koa';
import { pino } from 'pino';
import { request } from 'undici';
import { errorMapper } from '../../api/errors.ts';
import { errorBoundary } from '../../facilitator-service/app.ts';

const boundaries = [
  { name: 'the API', boundary: errorMapper },
  { name: 'the facilitator', boundary: errorBoundary },
];

describe('unhandled errors in the log', () => {
  for (const { name, boundary } of boundaries)
    it(`${name}: logs the kind, code and frames of an unhandled error, not its message`, async () => {
      const quoted = `caller-value-${randomBytes(8).toString('hex')}`;
      const lines: string[] = [];
      const log = pino({ level: 'trace' }, { write: (chunk: string) => void lines.push(chunk) });
      const app = new Koa();
      app.use(boundary(log));
      app.use(function refusingRoute() {
        // What node-postgres throws for a value PostgreSQL refuses: the value is in the message.
        throw Object.assign(new Error(`invalid input syntax for type integer: "${quoted}"`), { code: '22P02' });
      });
      const server = app.listen(0, '127.0.0.1');
      try {
        await new Promise((resolve) => server.once('listening', resolve));
        const res = await request(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, {
          headers: { 'x-model': quoted },
        });
        assert.equal(res.statusCode, 500);
        assert.equal(await res.body.text(), '');
        assert.equal(lines.length, 1, 'one line for the error');
        const line = JSON.parse(lines[0]) as { msg: string; err: string; at: string[] };
        assert.equal(line.msg, 'unhandled error');
        assert.equal(line.err, 'Error: 22P02');
        assert.match(line.at[0], /refusingRoute .*error-log\.test\.ts/, 'the frames say where it was thrown');
        assert.ok(!lines[0].includes(quoted), 'the quoted value is not logged');
      } finally {
        server.close();
      }
    });
});
