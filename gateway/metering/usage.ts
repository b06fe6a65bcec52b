// The token usage an LLM answer reports, in the shapes upstreams send it:
// - OpenAI Chat Completions: `usage.prompt_tokens` / `usage.completion_tokens`, in the JSON
//   answer or, streamed, in the last chunk (`stream_options.include_usage`; earlier chunks carry
//   `"usage": null`);
// - OpenAI Responses: `usage.input_tokens` / `usage.output_tokens`, in the JSON answer or,
//   streamed, in `response.completed`'s `response.usage`;
// - Anthropic Messages: `usage.input_tokens` / `usage.output_tokens` in the JSON answer; streamed,
//   `message_start` carries `message.usage` (input, and an early output count) and each
//   `message_delta` the cumulative `usage.output_tokens`, combined here with the start's input.
// The last usage seen wins, and a usage that is present but not a count (negative, fractional,
// a string, absurdly large) leaves no reading: the call is then charged 0, never a guess.

/** Above this a count is no count: no call reads or writes a billion tokens. */
const MAX_TOKENS = 1_000_000_000;

export type Usage = { input: number; output: number };

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** undefined: absent; null: present but not a count. */
function countOf(usage: Json, key: string): number | null | undefined {
  if (!Object.hasOwn(usage, key)) return undefined;
  const value = usage[key];
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 && value <= MAX_TOKENS ? value : null;
}

/** The counts of a usage object under whichever names it uses (Chat Completions', or the others'). */
function countsOf(usage: Json): { input: number | null | undefined; output: number | null | undefined } {
  const chat = Object.hasOwn(usage, 'prompt_tokens') || Object.hasOwn(usage, 'completion_tokens');
  return chat
    ? { input: countOf(usage, 'prompt_tokens'), output: countOf(usage, 'completion_tokens') }
    : { input: countOf(usage, 'input_tokens'), output: countOf(usage, 'output_tokens') };
}

/**
 * A whole usage: the input count is required, the output count defaults to 0 (an embeddings
 * answer has none). Null when malformed.
 */
function wholeUsage(usage: unknown): Usage | null {
  if (!isObject(usage)) return null;
  const { input, output } = countsOf(usage);
  if (typeof input !== 'number' || output === null) return null;
  return { input, output: output ?? 0 };
}

/**
 * Follows the usage reported across one answer: a JSON answer is one object, a stream one
 * object per event; `see` each in order, then `current` is the reading.
 */
export class UsageTracker {
  private last: Usage | null = null;
  /** Anthropic streams: the input count of `message_start`, for the deltas that follow. */
  private startInput: number | undefined;

  current(): Usage | null {
    return this.last;
  }

  see(value: unknown): void {
    if (!isObject(value)) return;
    const type = value.type;
    if (type === 'message_start') {
      const usage = isObject(value.message) ? value.message.usage : undefined;
      if (usage === undefined || usage === null) return;
      this.last = wholeUsage(usage);
      this.startInput = this.last?.input;
    } else if (type === 'message_delta') {
      if (value.usage === undefined || value.usage === null) return;
      this.last = this.delta(value.usage);
    } else if (typeof type === 'string' && type.startsWith('response.') && isObject(value.response)) {
      const usage = value.response.usage;
      if (usage !== undefined && usage !== null) this.last = wholeUsage(usage);
    } else if (value.usage !== undefined && value.usage !== null) {
      this.last = wholeUsage(value.usage);
    }
  }

  /**
   * An Anthropic `message_delta`: its counts are cumulative, its input count may be absent (the
   * start's then stands) and is never taken below the start's.
   */
  private delta(usage: unknown): Usage | null {
    if (!isObject(usage)) return null;
    const { input, output } = countsOf(usage);
    if (typeof output !== 'number' || input === null) return null;
    const known = input === undefined ? this.startInput : Math.max(input, this.startInput ?? 0);
    return known === undefined ? null : { input: known, output };
  }
}
