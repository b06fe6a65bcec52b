// A request sent up under the gateway's own JSON-RPC id (gateway/jsonrpc/own-id.ts): the request
// is the caller's but for its id, every number as written; the answer comes back with the
// caller's id wherever the gateway's stood, however its bytes are chunked, and nothing else of
// it changes; bytes that only look like the start of the id are held no longer than the next chunk.
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import fc from 'fast-check';
import { gatewayRpcId, idRestorer, restoringId, withOwnId } from '../../gateway/jsonrpc/own-id.ts';

const ID = 'x402gw0123456789abcdef0123456789abcdef';

function restoredIn(pieces: Buffer[], callerIdText: string): string {
  const restorer = idRestorer(ID, callerIdText);
  const out = pieces.map((piece) => restorer.push(piece));
  out.push(restorer.end());
  return Buffer.concat(out).toString('utf8');
}

function cut(text: string, cuts: number[]): Buffer[] {
  const bytes = Buffer.from(text, 'utf8');
  const at = [...new Set(cuts.filter((c) => c > 0 && c < bytes.length))].sort((a, b) => a - b);
  return [0, ...at].map((from, i) => bytes.subarray(from, at[i] ?? bytes.length));
}

describe('JSON-RPC requests under the gateway’s own id', () => {
  it('the request goes up the same but for its id, its numbers as the caller wrote them', () => {
    const body = Buffer.from(
      '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"n":1.0,"big":12345678901234567890}}}',
    );
    const own = withOwnId(body, ID)!;
    assert.equal(own.id, ID);
    assert.equal(own.callerIdText, '7');
    assert.equal(
      own.body.toString(),
      `{"jsonrpc":"2.0","id":"${ID}","method":"tools/call","params":{"name":"echo","arguments":{"n":1.0,"big":12345678901234567890}}}`,
    );
    assert.equal(withOwnId(Buffer.from('{"jsonrpc":"2.0","id":"a\\"b","method":"ping"}'), ID)!.callerIdText, '"a\\"b"');
    assert.equal(withOwnId(Buffer.from('{"jsonrpc":"2.0","id":1e400,"method":"ping"}'), ID)!.callerIdText, '1e400');
  });

  it('a notification, or a body that is not one JSON object, keeps its own', () => {
    assert.equal(withOwnId(Buffer.from('{"jsonrpc":"2.0","method":"notifications/initialized"}')), null);
    assert.equal(withOwnId(Buffer.from('[{"jsonrpc":"2.0","id":1,"method":"ping"}]')), null);
    assert.equal(withOwnId(Buffer.from('not json')), null);
  });

  it('fresh ids are letters and digits, and differ', () => {
    const a = gatewayRpcId();
    assert.match(a, /^x402gw[0-9a-f]{32}$/);
    assert.notEqual(a, gatewayRpcId());
  });

  it('the answer carries the caller’s id where the gateway’s stood, however it is chunked', () => {
    const answer = [
      `event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"requestId":"${ID}"}}\n\n`,
      `event: message\ndata: {"jsonrpc":"2.0","id":"${ID}","result":{"content":[{"type":"text","text":"\\"x402gw not the id"}]}}\n\n`,
    ].join('');
    const expected = answer.replaceAll(`"${ID}"`, '7');
    fc.assert(
      fc.property(fc.array(fc.nat({ max: answer.length }), { maxLength: 12 }), (cuts) => {
        assert.equal(restoredIn(cut(answer, cuts), '7'), expected);
      }),
    );
    // One byte at a time, and a caller's string id.
    assert.equal(
      restoredIn(
        cut(
          answer,
          [...answer].map((_, i) => i),
        ),
        '"q"',
      ),
      answer.replaceAll(`"${ID}"`, '"q"'),
    );
  });

  it('an answer without the id passes unchanged, holding back only what may begin it', () => {
    const restorer = idRestorer(ID, '7');
    assert.equal(
      restorer.push(Buffer.from('data: {"a":1}\n\n')).toString(),
      'data: {"a":1}\n\n',
      'an event is not held',
    );
    assert.equal(restorer.push(Buffer.from('{"b":"x402')).toString(), '{"b":', 'a possible start is held');
    assert.equal(
      restorer.push(Buffer.from('gw but not"}')).toString(),
      '"x402gw but not"}',
      'and let go by the next chunk',
    );
    assert.equal(restorer.push(Buffer.from('{"c":"')).toString(), '{"c":');
    assert.equal(restorer.end().toString(), '"', 'the end lets go what was held');
  });

  it('a stream is restored as it passes, and an upstream that breaks off still breaks the answer', async () => {
    const restored = restoringId(
      Readable.from([Buffer.from(`{"id":"${ID.slice(0, 9)}`), Buffer.from(`${ID.slice(9)}"}`)]),
      ID,
      '7',
    );
    const chunks: Buffer[] = [];
    for await (const chunk of restored) chunks.push(chunk as Buffer);
    assert.equal(Buffer.concat(chunks).toString(), '{"id":7}');

    const broken = new Readable({ read() {} });
    const out = restoringId(broken, ID, '7');
    const failed = new Promise((resolve) => out.on('error', resolve));
    broken.push(Buffer.from('{"id":'));
    broken.destroy(new Error('upstream went away'));
    assert.equal(((await failed) as Error).message, 'upstream went away');
  });
});
