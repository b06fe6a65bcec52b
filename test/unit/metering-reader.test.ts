// The meter reader (gateway/metering/reader.ts): the usage an answer reports, in every shape the
// LLM APIs send it, JSON or SSE, whatever the chunking (split at every byte, inside UTF-8
// sequences and line ends); a header's stated amount; no reading for anything it cannot trust;
// memory bounded whatever the upstream sends; and time linear in the bytes.
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  amountOfHeader,
  createMeterReader,
  DEFAULT_METER_MAX_BYTES,
  type MeterReading,
  type ResponseHeaders,
} from '../../gateway/metering/reader.ts';
import type { Meter } from '../../gateway/metering/meter.ts';
import {
  ANTHROPIC_JSON,
  ANTHROPIC_SSE,
  OPENAI_CHAT_JSON,
  OPENAI_CHAT_SSE,
  RESPONSES_JSON,
  RESPONSES_SSE,
} from '../support/llm-answers.ts';

const TOKENS: Meter = { kind: 'tokens', input_per_1k: '1000', output_per_1k: '2000' };
const HEADER: Meter = { kind: 'header', header: 'X-Usage-Cost' };
const JSON_TYPE = { 'content-type': 'application/json; charset=utf-8' };
const SSE_TYPE = { 'content-type': 'text/event-stream; charset=utf-8' };

function read(
  meter: Meter,
  headers: ResponseHeaders,
  chunks: Uint8Array[],
  maxBytes = DEFAULT_METER_MAX_BYTES,
): MeterReading {
  const reader = createMeterReader(meter, { maxBytes });
  reader.onHeaders(headers);
  for (const chunk of chunks) reader.onChunk(chunk);
  reader.onEnd();
  return reader.reading();
}

const usage = (input: number, output: number): MeterReading => ({ kind: 'usage', input, output });
const NONE: MeterReading = { kind: 'none' };

/** The bytes cut at these offsets. */
function cut(bytes: Buffer, offsets: number[]): Buffer[] {
  const points = [...new Set(offsets.map((o) => o % (bytes.length + 1)))].sort((a, b) => a - b);
  const out: Buffer[] = [];
  let from = 0;
  for (const p of points) {
    out.push(bytes.subarray(from, p));
    from = p;
  }
  out.push(bytes.subarray(from));
  return out;
}

const SAMPLES: [string, ResponseHeaders, string, MeterReading][] = [
  ['OpenAI Chat Completions JSON', JSON_TYPE, OPENAI_CHAT_JSON, usage(19, 10)],
  ['OpenAI Chat Completions stream', SSE_TYPE, OPENAI_CHAT_SSE, usage(12, 34)],
  ['OpenAI Responses JSON', JSON_TYPE, RESPONSES_JSON, usage(36, 87)],
  ['OpenAI Responses stream', SSE_TYPE, RESPONSES_SSE, usage(36, 87)],
  ['Anthropic Messages JSON', JSON_TYPE, ANTHROPIC_JSON, usage(2095, 503)],
  ['Anthropic Messages stream (message_start + message_delta)', SSE_TYPE, ANTHROPIC_SSE, usage(25, 15)],
];

describe('metering: the token usage an answer reports', () => {
  for (const [name, headers, text, expected] of SAMPLES) {
    const bytes = Buffer.from(text);
    it(`${name}: read whole, and split in two at every byte`, () => {
      assert.deepEqual(read(TOKENS, headers, [bytes]), expected);
      for (let k = 0; k <= bytes.length; k++)
        assert.deepEqual(read(TOKENS, headers, cut(bytes, [k])), expected, `split at ${k}`);
    });

    it(`${name}: byte by byte, and cut anywhere (property)`, () => {
      assert.deepEqual(
        read(
          TOKENS,
          headers,
          [...bytes].map((b) => Uint8Array.of(b)),
        ),
        expected,
      );
      fc.assert(
        fc.property(fc.array(fc.nat(), { maxLength: 30 }), (offsets) => {
          assert.deepEqual(read(TOKENS, headers, cut(bytes, offsets)), expected);
        }),
        { numRuns: 200 },
      );
    });
  }

  for (const [name, ending] of [
    ['CRLF', '\r\n'],
    ['CR', '\r'],
  ]) {
    it(`a stream whose lines end in ${name} reads the same, split at every byte`, () => {
      for (const sample of [OPENAI_CHAT_SSE, ANTHROPIC_SSE, RESPONSES_SSE]) {
        const bytes = Buffer.from(sample.replaceAll('\n', ending));
        const expected = read(TOKENS, SSE_TYPE, [Buffer.from(sample)]);
        for (let k = 0; k <= bytes.length; k++) assert.deepEqual(read(TOKENS, SSE_TYPE, cut(bytes, [k])), expected);
      }
    });
  }

  it('a stream: the last usage wins; a malformed last one leaves no reading', () => {
    const events = (...usages: string[]) =>
      Buffer.from(usages.map((u) => `data: {"choices":[],"usage":${u}}\n\n`).join(''));
    assert.deepEqual(
      read(TOKENS, SSE_TYPE, [
        events('{"prompt_tokens":1,"completion_tokens":2}', '{"prompt_tokens":3,"completion_tokens":4}'),
      ]),
      usage(3, 4),
    );
    assert.deepEqual(
      read(TOKENS, SSE_TYPE, [events('{"prompt_tokens":3,"completion_tokens":4}', 'null')]),
      usage(3, 4),
    );
    assert.deepEqual(
      read(TOKENS, SSE_TYPE, [events('{"prompt_tokens":3,"completion_tokens":4}', '{"prompt_tokens":-1}')]),
      NONE,
    );
  });

  it('Anthropic streams: the start gives the input, each delta the cumulative output', () => {
    const start = (u: string) => `event: message_start\ndata: {"type":"message_start","message":{"usage":${u}}}\n\n`;
    const delta = (u: string) => `event: message_delta\ndata: {"type":"message_delta","delta":{},"usage":${u}}\n\n`;
    const s = (...parts: string[]) => read(TOKENS, SSE_TYPE, [Buffer.from(parts.join(''))]);
    assert.deepEqual(s(start('{"input_tokens":25,"output_tokens":1}')), usage(25, 1), 'broken off after the start');
    assert.deepEqual(
      s(start('{"input_tokens":25,"output_tokens":1}'), delta('{"output_tokens":7}'), delta('{"output_tokens":15}')),
      usage(25, 15),
    );
    // A delta that states input as well (cumulative): never below the start's.
    assert.deepEqual(s(start('{"input_tokens":25}'), delta('{"input_tokens":30,"output_tokens":15}')), usage(30, 15));
    assert.deepEqual(s(start('{"input_tokens":25}'), delta('{"input_tokens":0,"output_tokens":15}')), usage(25, 15));
    assert.deepEqual(s(delta('{"output_tokens":15}')), NONE, 'a delta without a start has no input');
    assert.deepEqual(s(start('{"input_tokens":25}'), delta('{"input_tokens":3}')), NONE, 'a delta without output');
    assert.deepEqual(s(start('{"output_tokens":1}')), NONE, 'a start without input');
  });

  it('no usable usage: no reading', () => {
    const chat = (u: string) => Buffer.from(`{"object":"chat.completion","choices":[],"usage":${u}}`);
    for (const u of [
      'null',
      '[]',
      '{}',
      '"12"',
      '{"prompt_tokens":-1,"completion_tokens":2}',
      '{"prompt_tokens":1.5,"completion_tokens":2}',
      '{"prompt_tokens":"1","completion_tokens":2}',
      '{"prompt_tokens":1,"completion_tokens":-2}',
      '{"prompt_tokens":1,"completion_tokens":null}',
      '{"prompt_tokens":10000000000,"completion_tokens":2}',
      '{"prompt_tokens":1e300,"completion_tokens":2}',
      '{"completion_tokens":2}',
      '{"input_tokens":1,"output_tokens":{"n":2}}',
    ])
      assert.deepEqual(read(TOKENS, JSON_TYPE, [chat(u)]), NONE, u);
    assert.deepEqual(read(TOKENS, JSON_TYPE, [Buffer.from('{"choices":[]}')]), NONE, 'no usage at all');
    assert.deepEqual(read(TOKENS, JSON_TYPE, [Buffer.from('{"usage":{"prompt_tokens":1,')]), NONE, 'broken JSON');
    assert.deepEqual(read(TOKENS, JSON_TYPE, [Buffer.from('[{"usage":{"prompt_tokens":1}}]')]), NONE, 'not an object');
    // An embeddings answer has no output count: 0.
    assert.deepEqual(read(TOKENS, JSON_TYPE, [chat('{"prompt_tokens":8,"total_tokens":8}')]), usage(8, 0));
  });

  it('only the answer’s own usage counts, not a "usage" in its text or in a nested object', () => {
    const answer = {
      choices: [{ message: { content: '{"usage":{"prompt_tokens":999999,"completion_tokens":999999}}' } }],
      usage: { prompt_tokens: 5, completion_tokens: 6 },
    };
    assert.deepEqual(read(TOKENS, JSON_TYPE, [Buffer.from(JSON.stringify(answer))]), usage(5, 6));
    const nested = { content: [{ type: 'tool_use', input: { usage: { input_tokens: 1, output_tokens: 1 } } }] };
    assert.deepEqual(read(TOKENS, JSON_TYPE, [Buffer.from(JSON.stringify(nested))]), NONE);
  });

  it('which answers are read: JSON (any +json, or untyped) and SSE; not compressed, not another type', () => {
    const body = [Buffer.from(OPENAI_CHAT_JSON)];
    assert.deepEqual(read(TOKENS, {}, body), usage(19, 10), 'no content type');
    assert.deepEqual(read(TOKENS, { 'content-type': 'application/vnd.api+json' }, body), usage(19, 10));
    assert.deepEqual(read(TOKENS, { 'Content-Type': 'Application/JSON' }, body), usage(19, 10), 'any case');
    assert.deepEqual(read(TOKENS, { ...JSON_TYPE, 'content-encoding': 'identity' }, body), usage(19, 10));
    assert.deepEqual(read(TOKENS, { ...JSON_TYPE, 'content-encoding': 'gzip' }, body), NONE);
    assert.deepEqual(read(TOKENS, { 'content-type': 'text/html' }, body), NONE);
    assert.deepEqual(read(TOKENS, { 'content-type': 'text/plain' }, [Buffer.from(OPENAI_CHAT_SSE)]), NONE);
    assert.deepEqual(read(TOKENS, { ...SSE_TYPE, 'content-encoding': 'br' }, [Buffer.from(OPENAI_CHAT_SSE)]), NONE);
    const bom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(OPENAI_CHAT_SSE)]);
    assert.deepEqual(read(TOKENS, SSE_TYPE, cut(bom, [1, 2])), usage(12, 34), 'a BOM, itself split');
    const jsonBom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(OPENAI_CHAT_JSON)]);
    assert.deepEqual(read(TOKENS, JSON_TYPE, [jsonBom]), usage(19, 10));
  });

  it('SSE as the specification has it: joined data lines, comments, no space after the colon, no last blank line', () => {
    const s = (text: string) => read(TOKENS, SSE_TYPE, [Buffer.from(text)]);
    assert.deepEqual(
      s(': keep-alive\n\nid: 7\nevent: x\ndata:{"usage":\ndata: {"input_tokens":4,"output_tokens":5}}\n\n'),
      usage(4, 5),
    );
    assert.deepEqual(s('data: {"usage":{"input_tokens":4,"output_tokens":5}}'), usage(4, 5), 'the end ends the event');
    assert.deepEqual(s('data: {"usage":{"input_tokens":4,"output_tokens":5}}\n'), usage(4, 5));
    assert.deepEqual(s('data: {"usage":{"input_tokens":4,"output_tokens":5}'), NONE, 'broken off mid-event');
    assert.deepEqual(s('dat: {"usage":{"input_tokens":4,"output_tokens":5}}\n\n'), NONE, 'not a data line');
    assert.deepEqual(
      s('data: {"usage" :\t{"input_tokens":4,"output_tokens":5}}\n\n'),
      usage(4, 5),
      'spaces around the colon',
    );
  });

  it('a JSON answer larger than maxBytes is not read; one within is', () => {
    const padded = (n: number) =>
      Buffer.from(`{"pad":"${'x'.repeat(n)}","usage":{"input_tokens":1,"output_tokens":2}}`);
    const body = padded(1000);
    assert.deepEqual(read(TOKENS, JSON_TYPE, cut(body, [300, 600]), body.length), usage(1, 2));
    assert.deepEqual(read(TOKENS, JSON_TYPE, cut(body, [300, 600]), body.length - 1), NONE);
  });

  it('a stream event longer than maxBytes is skipped; the stream is read on', () => {
    const long = `data: {"pad":"${'x'.repeat(5000)}","usage":{"input_tokens":9,"output_tokens":9}}\n\n`;
    const next = 'data: {"usage":{"input_tokens":1,"output_tokens":2}}\n\n';
    assert.deepEqual(read(TOKENS, SSE_TYPE, cut(Buffer.from(long), [100, 4000]), 4096), NONE);
    assert.deepEqual(read(TOKENS, SSE_TYPE, cut(Buffer.from(long + next), [100, 4000, 5100]), 4096), usage(1, 2));
    // Many short data lines adding up past the bound spoil their event too.
    const many = `${'data: {"usage":{"input_tokens":3,"output_tokens":3}}\n'.repeat(200)}\n`;
    assert.deepEqual(read(TOKENS, SSE_TYPE, [Buffer.from(many + next)], 4096), usage(1, 2));
  });

  it('memory stays bounded: a 1 GB line without a line end, then a usage event', function () {
    this.timeout(60_000);
    const maxBytes = 1024 * 1024;
    const reader = createMeterReader(TOKENS, { maxBytes });
    reader.onHeaders(SSE_TYPE);
    const chunk = Buffer.alloc(1024 * 1024, 'a'); // the same buffer each time: only the reader could hold more
    const before = process.memoryUsage().arrayBuffers;
    reader.onChunk(Buffer.from('data: {"usage":{"input_tokens":9,"output_tokens":9},"pad":"'));
    let grew = 0;
    for (let i = 0; i < 1024; i++) {
      reader.onChunk(chunk);
      grew = Math.max(grew, process.memoryUsage().arrayBuffers - before);
    }
    reader.onChunk(Buffer.from('"}\n\ndata: {"usage":{"input_tokens":1,"output_tokens":2}}\n\n'));
    reader.onEnd();
    assert.deepEqual(reader.reading(), usage(1, 2));
    assert.ok(grew < 32 * maxBytes, `held ${grew} bytes for a 1 GB line`);

    const json = createMeterReader(TOKENS, { maxBytes });
    json.onHeaders(JSON_TYPE);
    const jsonBefore = process.memoryUsage().arrayBuffers;
    let jsonGrew = 0;
    for (let i = 0; i < 256; i++) {
      json.onChunk(chunk);
      jsonGrew = Math.max(jsonGrew, process.memoryUsage().arrayBuffers - jsonBefore);
    }
    json.onEnd();
    assert.deepEqual(json.reading(), NONE);
    assert.ok(jsonGrew < 32 * maxBytes, `held ${jsonGrew} bytes for a 256 MB JSON answer`);
  });

  it('memory stays bounded: a line trickled a byte at a time costs no object per byte', function () {
    this.timeout(60_000);
    const reader = createMeterReader(TOKENS, { maxBytes: 4 * 1024 * 1024 });
    reader.onHeaders(SSE_TYPE);
    reader.onChunk(Buffer.from('data: {"pad":"'));
    const byte = Buffer.from('z');
    const used = () => process.memoryUsage().heapUsed + process.memoryUsage().arrayBuffers;
    const before = used();
    // Two million bytes: held as an object each, they would take hundreds of MB; the bound
    // leaves room for the garbage of the calls themselves, which no collection has taken yet.
    for (let i = 0; i < 2_000_000; i++) reader.onChunk(byte);
    const grew = used() - before;
    reader.onChunk(Buffer.from('","usage":{"input_tokens":1,"output_tokens":2}}\n\n'));
    assert.deepEqual(reader.reading(), usage(1, 2));
    assert.ok(grew < 80 * 1024 * 1024, `held ${grew} bytes for a 2 MB line`);
  });

  it('the reader keeps no reference to a chunk it was handed', () => {
    const reader = createMeterReader(TOKENS, { maxBytes: 4096 });
    reader.onHeaders(SSE_TYPE);
    const chunk = Buffer.from('data: {"usage":{"input_tokens":4,\ndata: "output_tokens":5}}\n');
    reader.onChunk(chunk);
    chunk.fill(0x20); // the caller reuses its buffer
    reader.onChunk(Buffer.from('\n'));
    assert.deepEqual(reader.reading(), usage(4, 5));
  });

  it('time is linear in the bytes: 10 MB of stream in chunks, against 1 MB and a plain pass over the same bytes', function () {
    this.timeout(60_000);
    // An OpenAI stream (every chunk carries "usage":null) ending in its usage chunk, and one long
    // line: cut into 1–4 KiB chunks. A reader that re-scanned or re-joined what it holds on each
    // chunk would take about 100 times as long for 10 times the bytes.
    const one = OPENAI_CHAT_SSE.slice(0, OPENAI_CHAT_SSE.indexOf('data: [DONE]'));
    const stream = (mb: number) => Buffer.from(one.repeat(Math.ceil((mb * 1024 * 1024) / one.length)));
    const line = (mb: number) =>
      Buffer.concat([Buffer.from('data: "'), Buffer.alloc(mb * 1024 * 1024, 'y'), Buffer.from('"\n\n')]);
    const chunked = (bytes: Buffer) => {
      const out: Buffer[] = [];
      for (let at = 0, k = 0; at < bytes.length; k++) {
        const size = 1024 + ((k * 7919) % 3072);
        out.push(bytes.subarray(at, at + size));
        at += size;
      }
      return out;
    };
    const fastest = (run: () => void) => {
      let best = Infinity;
      for (let i = 0; i < 5; i++) {
        const t = performance.now();
        run();
        best = Math.min(best, performance.now() - t);
      }
      return best;
    };
    const scenarios = [
      ['an OpenAI stream', stream, DEFAULT_METER_MAX_BYTES],
      ['one long line, held whole', line, 16 * 1024 * 1024],
      ['one long line, over the bound', line, DEFAULT_METER_MAX_BYTES],
    ] as const;
    for (const [name, make, maxBytes] of scenarios) {
      const small = chunked(make(1));
      const large = chunked(make(10));
      // The baseline touches every byte once, as any line reader must at least do.
      let seen = 0;
      const baseline = fastest(() => {
        for (const c of large) seen += c.toString('latin1').length;
      });
      const timeSmall = fastest(() => read(TOKENS, SSE_TYPE, small, maxBytes));
      const timeLarge = fastest(() => read(TOKENS, SSE_TYPE, large, maxBytes));
      const said = `${name}: 1 MB ${timeSmall.toFixed(1)} ms, 10 MB ${timeLarge.toFixed(1)} ms, baseline ${baseline.toFixed(1)} ms`;
      assert.ok(seen > 0);
      assert.ok(timeLarge < 30 * timeSmall + 100, said);
      assert.ok(timeLarge < 100 * baseline + 100, said);
    }
    assert.deepEqual(read(TOKENS, SSE_TYPE, chunked(stream(10))), usage(12, 34));
  });
});

describe('metering: the amount a header states', () => {
  it('reads the meter’s header, whatever its case, on any answer, the body unread', () => {
    assert.deepEqual(read(HEADER, { 'x-usage-cost': '1500' }, []), { kind: 'amount', amount: 1500n });
    assert.deepEqual(read(HEADER, { 'X-Usage-Cost': '1500' }, [Buffer.from('anything')]), {
      kind: 'amount',
      amount: 1500n,
    });
    assert.deepEqual(read(HEADER, { 'x-other': '1500' }, []), NONE);
    assert.deepEqual(read(HEADER, { ...SSE_TYPE, 'content-encoding': 'gzip', 'x-usage-cost': '7' }, []), {
      kind: 'amount',
      amount: 7n,
    });
  });

  it('one decimal integer: leading zeros and surrounding whitespace allowed, nothing else', () => {
    const max = (1n << 256n) - 1n;
    const good: [string | string[], bigint][] = [
      ['0', 0n],
      ['42', 42n],
      ['007', 7n],
      [' \t42\t ', 42n],
      [['42'], 42n],
      [max.toString(), max],
      [`000${max}`, max],
    ];
    for (const [value, amount] of good) assert.equal(amountOfHeader(value), amount, JSON.stringify(value));
    const bad: (string | string[] | undefined)[] = [
      undefined,
      '',
      ' ',
      '-5',
      '+5',
      '1.5',
      '1e3',
      '0x10',
      '1 000',
      '1_000',
      '5, 6',
      '５',
      '5\n',
      ['5', '6'],
      [],
      (max + 1n).toString(),
      '9'.repeat(300),
    ];
    for (const value of bad) assert.equal(amountOfHeader(value), null, JSON.stringify(value));
  });

  it('any decimal uint256 reads as itself (property)', () => {
    fc.assert(
      fc.property(fc.bigInt({ min: 0n, max: (1n << 256n) - 1n }), fc.nat({ max: 5 }), (n, zeros) => {
        assert.equal(amountOfHeader(`${'0'.repeat(zeros)}${n}`), n);
      }),
    );
  });
});
