// The facilitator's JSON-RPC calls on the settlement's path (facilitator/chain.ts, rpcNow): reads
// asked together go as one batch, answers matched by id whatever their order; a send goes alone;
// a node that refuses batches, or answers one badly, still gets every call asked and answered.
// The node here is a small HTTP server of the test's own (a fake, named so: anvil takes batches
// and answers them well, so the refusals cannot be had from it; the settlement suites run the
// same calls against anvil).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isError } from 'ethers';
import { createChainProvider, rpcNow, simulate } from '../../facilitator/chain.ts';

type Request = { id: number; method: string; params: unknown[] };
/** How the fake node answers a batch: well (in reverse order), one error for all, HTTP 400, or nulls. */
type BatchAnswer = 'answers' | 'one-error' | 'http-400' | 'nulls';

async function fakeNode(batches: BatchAnswer): Promise<{ url: string; bodies: unknown[]; close(): Promise<void> }> {
  const bodies: unknown[] = [];
  // eth_call with data 0xdead: a node error that is not a revert (a rate limit); 0xbad: a revert.
  const answer = (r: Request) => {
    const data = (r.params[0] as { data?: string } | undefined)?.data;
    if (r.method === 'eth_call' && data === '0xdead')
      return { jsonrpc: '2.0', id: r.id, error: { code: -32005, message: 'rate limit exceeded' } };
    if (r.method === 'eth_call' && data === '0xbad')
      return { jsonrpc: '2.0', id: r.id, error: { code: 3, message: 'execution reverted', data: '0x' } };
    return { jsonrpc: '2.0', id: r.id, result: r.params[0] };
  };
  const server: Server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk: Buffer) => (text += chunk.toString()));
    req.on('end', () => {
      const body = JSON.parse(text) as Request | Request[];
      bodies.push(body);
      res.setHeader('content-type', 'application/json');
      if (!Array.isArray(body)) return res.end(JSON.stringify(answer(body)));
      if (batches === 'http-400') {
        res.statusCode = 400;
        return res.end('{}');
      }
      if (batches === 'one-error')
        return res.end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32600, message: 'no batches' } }));
      res.end(JSON.stringify(batches === 'nulls' ? body.map(() => null) : body.map(answer).reverse()));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    bodies,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

async function withNode(
  batches: BatchAnswer,
  test: (node: Awaited<ReturnType<typeof fakeNode>>, provider: ReturnType<typeof createChainProvider>) => Promise<void>,
) {
  const node = await fakeNode(batches);
  const provider = createChainProvider(node.url, 31337);
  try {
    await test(node, provider);
  } finally {
    provider.destroy();
    await node.close();
  }
}

const read = (provider: ReturnType<typeof createChainProvider>, value: string) =>
  rpcNow(provider, 'eth_getTransactionCount', [value, 'pending']);

describe('facilitator JSON-RPC calls (rpcNow)', () => {
  it('sends the reads asked together as one batch and gives each its own answer; a send goes alone', () =>
    withNode('answers', async (node, provider) => {
      const answers = await Promise.all([
        read(provider, 'a'),
        read(provider, 'b'),
        rpcNow(provider, 'eth_sendRawTransaction', ['0x01']),
        read(provider, 'c'),
      ]);
      assert.deepEqual(answers, ['a', 'b', '0x01', 'c']);
      assert.equal(node.bodies.length, 2, 'the send, then one batch of the reads');
      assert.equal((node.bodies[0] as Request).method, 'eth_sendRawTransaction', 'the send at once, alone');
      assert.deepEqual(
        (node.bodies[1] as Request[]).map((r) => r.params[0]),
        ['a', 'b', 'c'],
      );

      const failed = await Promise.allSettled([
        rpcNow(provider, 'eth_call', [{ to: '0x0', data: '0xdead' }, 'latest']),
        read(provider, 'd'),
      ]);
      assert.equal(failed[0].status, 'rejected');
      assert.deepEqual(failed[1], { status: 'fulfilled', value: 'd' }, 'an error answers its own call only');

      // A call asked after an await is a request of its own; a batch holds at most 10.
      assert.equal(await read(provider, 'e'), 'e');
      const before = node.bodies.length;
      const many = await Promise.all(Array.from({ length: 25 }, (_, i) => read(provider, `m${i}`)));
      assert.deepEqual(
        many,
        Array.from({ length: 25 }, (_, i) => `m${i}`),
      );
      assert.deepEqual(
        node.bodies.slice(before).map((b) => (b as Request[]).length),
        [10, 10, 5],
      );
    }));

  it('a simulation refused by a node error that is not a revert (a rate limit) is thrown, to be retried; a revert is the answer', () =>
    withNode('answers', async (_node, provider) => {
      const tx = (data: string) => ({
        from: '0x0000000000000000000000000000000000000001',
        to: '0x0000000000000000000000000000000000000002',
        data,
      });
      await assert.rejects(simulate(provider, tx('0xdead')), (err) => isError(err, 'CALL_EXCEPTION'));
      assert.equal(typeof (await simulate(provider, tx('0xbad'))), 'string', 'a revert is a cause');
      assert.equal(await simulate(provider, tx('0x')), null);
    }));

  for (const batches of ['one-error', 'http-400', 'nulls'] as const) {
    it(`a node that answers a batch ${batches === 'one-error' ? 'with one error' : batches === 'http-400' ? 'with HTTP 400' : 'with nulls'}: each call is asked alone and answered`, () =>
      withNode(batches, async (node, provider) => {
        const answers = await Promise.all([read(provider, 'a'), read(provider, 'b')]);
        assert.deepEqual(answers, ['a', 'b']);
        assert.equal(node.bodies.length, 3, 'the batch, then each call alone');
        assert.ok(node.bodies.slice(1).every((body) => !Array.isArray(body)));
      }));
  }
});
