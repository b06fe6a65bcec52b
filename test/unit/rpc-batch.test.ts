// The facilitator's JSON-RPC calls on the settlement's path (facilitator/chain.ts, rpcNow): calls
// made in one synchronous run go as one batch, answers matched by id whatever their order, and
// a node that refuses batches gets them one by one. The node here is a small HTTP server of the
// test's own (a fake, named so: anvil takes batches, so a node that refuses them cannot be had
// from it; the settlement suites run the same calls against anvil).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isError } from 'ethers';
import { createChainProvider, rpcNow } from '../../facilitator/chain.ts';

type Request = { id: number; method: string; params: unknown[] };

/** A fake JSON-RPC node: `eth_echo` answers its first param, `eth_fail` an error; batches answered in reverse order. */
async function fakeNode(takesBatches: boolean): Promise<{ url: string; bodies: unknown[]; close(): Promise<void> }> {
  const bodies: unknown[] = [];
  const answer = (r: Request) =>
    r.method === 'eth_fail'
      ? { jsonrpc: '2.0', id: r.id, error: { code: -32000, message: 'no such thing' } }
      : { jsonrpc: '2.0', id: r.id, result: r.params[0] };
  const server: Server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk: Buffer) => (text += chunk.toString()));
    req.on('end', () => {
      const body = JSON.parse(text) as Request | Request[];
      bodies.push(body);
      res.setHeader('content-type', 'application/json');
      if (!Array.isArray(body)) return res.end(JSON.stringify(answer(body)));
      if (!takesBatches)
        return res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32600, message: 'no batches' } }));
      res.end(JSON.stringify(body.map(answer).reverse()));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    bodies,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

describe('facilitator JSON-RPC calls (rpcNow)', () => {
  it('sends the calls of one synchronous run as one batch and gives each its own answer', async () => {
    const node = await fakeNode(true);
    const provider = createChainProvider(node.url, 31337);
    try {
      const answers = await Promise.all([
        rpcNow(provider, 'eth_echo', ['a']),
        rpcNow(provider, 'eth_echo', ['b']),
        rpcNow(provider, 'eth_echo', ['c']),
      ]);
      assert.deepEqual(answers, ['a', 'b', 'c']);
      assert.equal(node.bodies.length, 1, 'one request');
      assert.equal((node.bodies[0] as Request[]).length, 3);

      const failed = await Promise.allSettled([rpcNow(provider, 'eth_fail', []), rpcNow(provider, 'eth_echo', ['d'])]);
      assert.equal(failed[0].status, 'rejected');
      assert.ok(isError((failed[0] as PromiseRejectedResult).reason, 'UNKNOWN_ERROR'));
      assert.deepEqual(failed[1], { status: 'fulfilled', value: 'd' }, 'an error answers its own call only');

      // A call made after an await is a request of its own.
      assert.equal(await rpcNow(provider, 'eth_echo', ['e']), 'e');
      assert.deepEqual(node.bodies.at(-1), {
        method: 'eth_echo',
        params: ['e'],
        id: (node.bodies.at(-1) as Request).id,
        jsonrpc: '2.0',
      });
      assert.equal(node.bodies.length, 3);
    } finally {
      provider.destroy();
      await node.close();
    }
  });

  it('sends them one by one to a node that refuses batches', async () => {
    const node = await fakeNode(false);
    const provider = createChainProvider(node.url, 31337);
    try {
      const answers = await Promise.all([rpcNow(provider, 'eth_echo', ['a']), rpcNow(provider, 'eth_echo', ['b'])]);
      assert.deepEqual(answers, ['a', 'b']);
      assert.equal(node.bodies.length, 3, 'the batch, then each call alone');
      assert.ok(node.bodies.slice(1).every((body) => !Array.isArray(body)));
    } finally {
      provider.destroy();
      await node.close();
    }
  });
});
