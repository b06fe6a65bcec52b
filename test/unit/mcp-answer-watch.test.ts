// The watch of an MCP answer (gateway/mcp/answer-watch.ts): a JSON-RPC error or a tool result
// with `isError` answering the paid request says it failed, in a JSON body or an SSE stream,
// however the bytes are chunked; a success, another request's failure, a notification, an
// answer it cannot read or one over its bound says nothing.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { failedResponseTo, watchAnswer } from '../../gateway/mcp/answer-watch.ts';
import type { ResponseHeaders } from '../../gateway/metering/reader.ts';

const JSON_TYPE = { 'content-type': 'application/json' };
const SSE_TYPE = { 'content-type': 'text/event-stream' };
const ID = 'call-7';

const response = (body: Record<string, unknown>, id: unknown = ID) => JSON.stringify({ jsonrpc: '2.0', id, ...body });
const OK = response({ result: { content: [{ type: 'text', text: 'fine: "error" is only a word here' }] } });
const TOOL_FAILED = response({ result: { isError: true, content: [{ type: 'text', text: 'no such city' }] } });
const RPC_ERROR = response({ error: { code: -32602, message: 'Resource test://x not found' } });
const sse = (...data: string[]) => data.map((d) => `event: message\ndata: ${d}\n\n`).join('');
const NOTE = JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { data: 'an error occurred' } });

function watched(headers: ResponseHeaders, body: string, split: number[] = [], maxBytes = 1 << 20): boolean {
  const watch = watchAnswer(ID, maxBytes);
  watch.onHeaders(headers);
  const bytes = Buffer.from(body, 'utf8');
  let at = 0;
  for (const cut of [...split.filter((c) => c > 0 && c < bytes.length)].sort((a, b) => a - b)) {
    watch.onChunk(bytes.subarray(at, cut));
    at = cut;
  }
  watch.onChunk(bytes.subarray(at));
  watch.onEnd();
  return watch.failed();
}

describe('MCP answer watch: did the paid request fail?', () => {
  it('a tool result with isError, or a JSON-RPC error, answering the request: failed', () => {
    assert.equal(watched(JSON_TYPE, TOOL_FAILED), true);
    assert.equal(watched(JSON_TYPE, RPC_ERROR), true);
    assert.equal(watched(SSE_TYPE, sse(NOTE, TOOL_FAILED)), true);
    assert.equal(watched(SSE_TYPE, sse(NOTE, RPC_ERROR)), true);
    assert.equal(watched({}, RPC_ERROR), true, 'no content type is read as JSON');
    assert.equal(watched(JSON_TYPE, `\uFEFF${RPC_ERROR}`), true, 'a leading BOM');
  });

  it('a success, another request, a notification or a result whose isError is not true: not failed', () => {
    assert.equal(watched(JSON_TYPE, OK), false);
    assert.equal(watched(SSE_TYPE, sse(NOTE, OK)), false);
    assert.equal(watched(JSON_TYPE, response({ error: { code: 1, message: 'x' } }, 'other')), false);
    assert.equal(watched(JSON_TYPE, response({ error: { code: 1, message: 'x' } }, 7)), false, 'the id, typed');
    assert.equal(watched(JSON_TYPE, response({ result: { isError: 'true', content: [] } })), false);
    assert.equal(watched(SSE_TYPE, sse(NOTE)), false);
    // A request the server sends the client with the same id is not the answer.
    assert.equal(watched(SSE_TYPE, sse(response({ method: 'sampling/createMessage', error: {} }), OK)), false);
  });

  it('a batch holding the failed response: failed', () => {
    assert.equal(failedResponseTo([JSON.parse(OK.replace(ID, 'x')), JSON.parse(RPC_ERROR)], ID), true);
    assert.equal(failedResponseTo([JSON.parse(OK)], ID), false);
  });

  it('an answer it cannot read says nothing: compressed, another type, over the bound, broken JSON', () => {
    assert.equal(watched({ ...JSON_TYPE, 'content-encoding': 'gzip' }, RPC_ERROR), false);
    assert.equal(watched({ 'content-type': 'text/plain' }, RPC_ERROR), false);
    assert.equal(watched(JSON_TYPE, RPC_ERROR, [], 16), false);
    assert.equal(watched(SSE_TYPE, sse(RPC_ERROR), [], 16), false);
    assert.equal(watched(JSON_TYPE, RPC_ERROR.slice(0, -1)), false);
  });

  it('whatever the chunking, the same verdict', () => {
    const bodies: Array<[ResponseHeaders, string, boolean]> = [
      [JSON_TYPE, TOOL_FAILED, true],
      [JSON_TYPE, OK, false],
      [SSE_TYPE, sse(NOTE, RPC_ERROR).replaceAll('\n', '\r\n'), true],
      [SSE_TYPE, sse(NOTE, OK, NOTE), false],
    ];
    fc.assert(
      fc.property(
        fc.constantFrom(...bodies),
        fc.array(fc.nat(400), { maxLength: 12 }),
        ([headers, body, failed], cuts) => {
          assert.equal(watched(headers, body, cuts), failed);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('an SSE failure is seen as its event ends, before the stream does', () => {
    const watch = watchAnswer(ID, 1 << 20);
    watch.onHeaders(SSE_TYPE);
    watch.onChunk(Buffer.from(sse(NOTE, TOOL_FAILED)));
    assert.equal(watch.failed(), true);
  });
});
