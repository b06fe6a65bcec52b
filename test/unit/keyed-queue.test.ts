import assert from 'node:assert/strict';
import { createKeyedQueue } from '../../lib/keyed-queue.ts';

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe('keyed queue', () => {
  it('runs one task per key at a time, in arrival order, and never makes another key wait', async () => {
    const queue = createKeyedQueue();
    const order: string[] = [];
    const gate = deferred();
    const first = queue('a', async () => {
      order.push('a1 start');
      await gate.promise;
      order.push('a1 end');
    });
    const second = queue('a', async () => void order.push('a2'));
    await queue('b', async () => void order.push('b1'));
    assert.deepEqual(order, ['a1 start', 'b1'], 'b ran while a1 was running; a2 waits for a1');
    gate.resolve();
    await Promise.all([first, second]);
    assert.deepEqual(order, ['a1 start', 'b1', 'a1 end', 'a2']);
  });

  it('goes on after a failed task and hands each caller its own outcome', async () => {
    const queue = createKeyedQueue();
    const failed = queue('a', async () => {
      throw new Error('boom');
    });
    const next = queue('a', async () => 42);
    await assert.rejects(failed, /boom/);
    assert.equal(await next, 42);
  });
});
