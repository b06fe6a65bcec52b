// The demo agent's OpenAI-shaped endpoint (scripts/demo-upstream.ts, `POST /v1/chat/completions`),
// an agent to meter with the x402 `upto` scheme: it answers `echo: <the last user message>` as a
// Chat Completions JSON with `usage`, or with `"stream": true` as chunks whose last carries the
// usage (sent whether or not `stream_options.include_usage` asks for it), then `data: [DONE]`.
// A token is a word (a run of non-space characters) of the messages' text, and the answer states
// its price in `X-Usage-Cost`, the charge a tokens meter at DEMO_PRICES computes from the same
// usage: either meter can be tried on it.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';

/** Per 1000 input and output tokens, in the asset's smallest unit (USDC: 0.01 and 0.02). */
export const DEMO_PRICES = { input_per_1k: '10000', output_per_1k: '20000' } as const;

type Message = { role?: unknown; content?: unknown };

/** A message's text: a string, or the text parts of a list of parts. */
function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((part: { type?: unknown; text?: unknown }) =>
      part?.type === 'text' && typeof part.text === 'string' ? part.text : '',
    )
    .join(' ');
}

const words = (text: string) => text.match(/\S+/g)?.length ?? 0;

function invalid(res: ServerResponse, message: string): void {
  res.writeHead(400, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code: null } }));
}

export function serveChatCompletions(req: IncomingMessage, res: ServerResponse, body: Buffer): void {
  if (req.method !== 'POST') {
    res.writeHead(405, { allow: 'POST' }).end();
    return;
  }
  let request: { model?: unknown; messages?: unknown; stream?: unknown };
  try {
    request = JSON.parse(body.toString('utf8')) as typeof request;
  } catch {
    invalid(res, 'the body must be JSON');
    return;
  }
  if (typeof request !== 'object' || request === null || !Array.isArray(request.messages)) {
    invalid(res, 'messages must be an array');
    return;
  }
  const messages = request.messages as Message[];
  const lastUser = messages.findLast((m) => m?.role === 'user');
  const answer = `echo: ${textOf(lastUser?.content)}`;
  const promptTokens = messages.reduce((n, m) => n + words(textOf(m?.content)), 0);
  const completionTokens = words(answer);
  const usage = {
    prompt_tokens: promptTokens,
    completion_tokens: completionTokens,
    total_tokens: promptTokens + completionTokens,
  };
  const milli =
    BigInt(promptTokens) * BigInt(DEMO_PRICES.input_per_1k) +
    BigInt(completionTokens) * BigInt(DEMO_PRICES.output_per_1k);
  const cost = ((milli + 999n) / 1000n).toString();
  const head = {
    id: `chatcmpl-${randomUUID()}`,
    created: Math.floor(Date.now() / 1000),
    model: typeof request.model === 'string' ? request.model : 'demo-echo',
  };

  if (request.stream !== true) {
    res.writeHead(200, { 'content-type': 'application/json', 'x-usage-cost': cost });
    res.end(
      JSON.stringify({
        ...head,
        object: 'chat.completion',
        choices: [{ index: 0, message: { role: 'assistant', content: answer }, finish_reason: 'stop' }],
        usage,
      }),
    );
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-usage-cost': cost });
  const send = (fields: Record<string, unknown>) =>
    res.write(`data: ${JSON.stringify({ ...head, object: 'chat.completion.chunk', ...fields })}\n\n`);
  send({ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] });
  for (const piece of answer.match(/\S+\s*/g) ?? [])
    send({ choices: [{ index: 0, delta: { content: piece }, finish_reason: null }] });
  send({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
  send({ choices: [], usage });
  res.end('data: [DONE]\n\n');
}
