// A request sent up under the gateway's own JSON-RPC id (gateway/jsonrpc/own-id.ts): the request
// is the caller's byte for byte but for its id's value, and one naming its id twice is refused;
// the answer comes back with the caller's id wherever the gateway's stood (quoted, escaped inside
// a string, or in plain text), however its bytes are chunked, and nothing else of it changes;
// bytes that only look like the start of the id are held no longer than the next chunk. An
// answer the upstream encoded all the same is decoded first.
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { gzipSync } from 'node:zlib';
import fc from 'fast-check';
import { decodedAnswer, gatewayRpcId, idRestorer, restoringId, withOwnId } from '../../gateway/jsonrpc/own-id.ts';
import { topLevelMemberSpans } from '../../gateway/jsonrpc/member-spans.ts';
import { JsonRpcRequestError } from '../../gateway/jsonrpc/request.ts';
import { parseMcpBody } from '../../api/proxy/mcp.ts';
import { ApiError } from '../../api/errors.ts';

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
    const own = withOwnId(body, undefined, ID)!;
    assert.equal(own.id, ID);
    assert.equal(own.callerIdText, '7');
    assert.equal(
      own.body.toString(),
      `{"jsonrpc":"2.0","id":"${ID}","method":"tools/call","params":{"name":"echo","arguments":{"n":1.0,"big":12345678901234567890}}}`,
    );
    assert.equal(
      withOwnId(Buffer.from('{"jsonrpc":"2.0","id":"a\\"b","method":"ping"}'), undefined, ID)!.callerIdText,
      '"a\\"b"',
    );
    assert.equal(
      withOwnId(Buffer.from('{"jsonrpc":"2.0","id":1e400,"method":"ping"}'), undefined, ID)!.callerIdText,
      '1e400',
    );
  });

  it('only the id changes: spacing, escapes, key order and nested ids stay as sent', () => {
    const sent =
      ' { "params" : {"id": 1, "arguments": {"id": "x", "s": "\\"id\\": 2"}} ,\n "\\u0069d" :\t"a\\u0062" , "jsonrpc":"2.0", "method":"tools/call"}';
    const own = withOwnId(Buffer.from(sent), undefined, ID)!;
    assert.equal(own.callerIdText, '"a\\u0062"');
    assert.equal(own.body.toString(), sent.replace('"a\\u0062"', `"${ID}"`));
    assert.equal((JSON.parse(own.body.toString()) as { id: string }).id, ID);
  });

  it('a notification keeps none; a request naming its id twice is refused', () => {
    assert.equal(withOwnId(Buffer.from('{"jsonrpc":"2.0","method":"notifications/initialized"}')), null);
    assert.throws(
      () => withOwnId(Buffer.from('{"jsonrpc":"2.0","id":1,"method":"ping","\\u0069d":2}')),
      JsonRpcRequestError,
    );
  });

  it('an agent charging after the answer is refused, at the door, a request naming its id twice (400)', () => {
    const twice = Buffer.from('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"},"id":2}');
    assert.throws(
      () => parseMcpBody(twice, true),
      (err: unknown) => err instanceof ApiError && err.status === 400 && /id twice/.test(err.message),
    );
    assert.equal(parseMcpBody(twice).rpcId, 2, 'any other agent passes it, as JSON.parse reads it');
  });

  it('the spans of a top-level member, whatever the values around it hold', () => {
    const text = Buffer.from('{"a":[{"id":1},"]}\\\\",{"b":"}"}],"id" : -1.5e3 ,"c":{"id":{}},"d":true}');
    assert.deepEqual(
      topLevelMemberSpans(text, 'id').map(([s, e]) => text.toString('utf8', s, e)),
      ['-1.5e3'],
    );
    assert.deepEqual(topLevelMemberSpans(Buffer.from('{}'), 'id'), []);
    assert.deepEqual(topLevelMemberSpans(Buffer.from('{"id":null,"id":"x"}'), 'id').length, 2);
    assert.throws(() => topLevelMemberSpans(Buffer.from('[1]'), 'id'), SyntaxError);
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

  it('the id inside a string, escaped or in plain text, becomes the caller’s as that string holds it', () => {
    const answer = `{"id":"${ID}","error":{"message":"request ${ID} failed","data":"{\\"id\\":\\"${ID}\\"}"}}`;
    assert.equal(
      restoredIn(cut(answer, [9, 30, 31, 70]), '"a\\"b"'),
      `{"id":"a\\"b","error":{"message":"request a\\"b failed","data":"{\\"id\\":\\"a\\"b\\"}"}}`,
    );
    assert.equal(
      restoredIn(cut(answer, []), '7'),
      `{"id":7,"error":{"message":"request 7 failed","data":"{\\"id\\":\\"7\\"}"}}`,
    );
  });

  it('an answer the upstream encoded all the same is read decoded; an unknown encoding is not', async () => {
    const text = `{"jsonrpc":"2.0","id":"${ID}","result":{}}`;
    const decoded = decodedAnswer({ 'content-encoding': 'gzip' }, Readable.from([gzipSync(text)]))!;
    const chunks: Buffer[] = [];
    for await (const chunk of restoringId(decoded, ID, '7')) chunks.push(chunk as Buffer);
    assert.equal(Buffer.concat(chunks).toString(), '{"jsonrpc":"2.0","id":7,"result":{}}');
    assert.equal(decodedAnswer({ 'content-encoding': 'gzip, br' }, Readable.from([])), null);
    const plain = Readable.from([]);
    assert.equal(decodedAnswer({}, plain), plain);
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
