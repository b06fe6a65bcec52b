// npm start's demo agent (scripts/demo-upstream.ts), run alone on a free port as `npm start`
// runs it: its OpenAI-shaped endpoint answers Chat Completions JSON and streams whose usage the
// meter reads (gateway/metering/), and states the same charge in X-Usage-Cost, so that both
// meters measure it alike; its plain echo is unchanged beside it.
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { freePort, isPortFree, waitFor } from '../../scripts/lib/ports.ts';
import { DEMO_PRICES } from '../../scripts/lib/demo-chat.ts';
import { chargeFor } from '../../gateway/metering/charge.ts';
import type { Meter } from '../../gateway/metering/meter.ts';
import { createMeterReader, DEFAULT_METER_MAX_BYTES, type MeterReading } from '../../gateway/metering/reader.ts';

const TOKENS: Meter = { kind: 'tokens', ...DEMO_PRICES };
const HEADER: Meter = { kind: 'header', header: 'X-Usage-Cost' };
const MAXIMUM = 1_000_000n;
const OK = { kind: 'answered', status: 200, complete: true } as const;

/** The answer fed through a reader of each meter as its chunks arrive. */
async function metered(res: Response): Promise<{ tokens: MeterReading; header: MeterReading; text: string }> {
  const readers = [
    createMeterReader(TOKENS, { maxBytes: DEFAULT_METER_MAX_BYTES }),
    createMeterReader(HEADER, { maxBytes: DEFAULT_METER_MAX_BYTES }),
  ];
  const headers = Object.fromEntries(res.headers);
  for (const r of readers) r.onHeaders(headers);
  const chunks: Uint8Array[] = [];
  const body = res.body;
  assert.ok(body);
  for await (const chunk of body) {
    chunks.push(chunk);
    for (const r of readers) r.onChunk(chunk);
  }
  for (const r of readers) r.onEnd();
  return { tokens: readers[0].reading(), header: readers[1].reading(), text: Buffer.concat(chunks).toString('utf8') };
}

describe('the demo agent: an OpenAI-shaped endpoint to meter', function () {
  this.timeout(60_000);
  let demo: ChildProcess;
  let base: string;

  before(async () => {
    const port = await freePort();
    demo = spawn(process.execPath, ['scripts/demo-upstream.ts'], {
      env: { ...process.env, DEMO_UPSTREAM_PORT: String(port) },
      stdio: 'ignore',
    });
    base = `http://127.0.0.1:${port}`;
    await waitFor('the demo agent', async () => !(await isPortFree(port)), 30_000);
  });
  after(() => demo.kill('SIGTERM'));

  const chat = (body: unknown) =>
    fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const messages = [
    { role: 'system', content: 'You echo.' },
    { role: 'user', content: [{ type: 'text', text: 'héllo wörld, how are you 🙂' }] },
  ];
  // Words: 2 (system) + 6 (user) in; "echo:" and the 6 words echoed out.
  const expected = { kind: 'usage', input: 8, output: 7 };
  const cost = 8n * 10n + 7n * 20n;

  it('answers a Chat Completions JSON whose usage the tokens meter reads, its price in X-Usage-Cost', async () => {
    const res = await chat({ model: 'demo', messages });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    const { tokens, header, text } = await metered(res);
    const answer = JSON.parse(text) as {
      object: string;
      model: string;
      choices: { message: { content: string } }[];
      usage: unknown;
    };
    assert.equal(answer.object, 'chat.completion');
    assert.equal(answer.model, 'demo');
    assert.equal(answer.choices[0].message.content, 'echo: héllo wörld, how are you 🙂');
    assert.deepEqual(answer.usage, { prompt_tokens: 8, completion_tokens: 7, total_tokens: 15 });
    assert.deepEqual(tokens, expected);
    assert.deepEqual(header, { kind: 'amount', amount: cost });
    assert.deepEqual(chargeFor(tokens, TOKENS, MAXIMUM, OK), { charge: cost, capped: false, reason: 'measured' });
    assert.deepEqual(chargeFor(header, HEADER, MAXIMUM, OK), { charge: cost, capped: false, reason: 'measured' });
  });

  it('with "stream": true, answers chunks ending with the usage chunk and [DONE], read alike', async () => {
    const res = await chat({ model: 'demo', messages, stream: true, stream_options: { include_usage: true } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const { tokens, header, text } = await metered(res);
    const events = text.split('\n\n').filter(Boolean);
    assert.equal(events.at(-1), 'data: [DONE]');
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.replace(/^data: /, '')) as Record<string, unknown>);
    assert.ok(chunks.every((c) => c.object === 'chat.completion.chunk'));
    const content = chunks
      .flatMap((c) => (c.choices as { delta: { content?: string } }[]).map((choice) => choice.delta.content ?? ''))
      .join('');
    assert.equal(content, 'echo: héllo wörld, how are you 🙂');
    assert.deepEqual(chunks.at(-1)?.usage, { prompt_tokens: 8, completion_tokens: 7, total_tokens: 15 });
    assert.deepEqual(tokens, expected);
    assert.deepEqual(header, { kind: 'amount', amount: cost });
  });

  it('refuses what is not a chat request, and keeps the plain echo', async () => {
    const bad = await fetch(`${base}/v1/chat/completions`, { method: 'POST', body: 'not json' });
    assert.equal(bad.status, 400);
    assert.equal(((await bad.json()) as { error: { type: string } }).error.type, 'invalid_request_error');
    assert.equal((await chat({ model: 'demo' })).status, 400);
    assert.equal((await fetch(`${base}/v1/chat/completions`)).status, 405);
    const plain = await fetch(`${base}/`, { method: 'POST', body: 'hi' });
    assert.deepEqual(await plain.json(), { echo: 'hi', request_id: null });
  });
});
