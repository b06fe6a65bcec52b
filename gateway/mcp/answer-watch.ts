// Whether an MCP agent's answer says the paid request failed: the JSON-RPC response to it is an
// `error`, or a result with `isError: true` (a tool that failed). A call charged after its answer
// (`upto`, `batch-settlement`) then costs nothing, as the x402 MCP transport's reference server
// settles only a tool that did not fail (gateway/invocations/metered.ts). Read beside the meter,
// from the same bytes and within the same bound: a JSON answer whole at its end, an SSE answer
// event by event, and only an event or body holding `"error"` or `"isError"` is parsed, so a
// successful answer costs one byte search. An answer that cannot be read (compressed, another
// content type, over the bound) says nothing: the call keeps its charge.
import { BoundedBytes } from '../metering/bytes.ts';
import { bodyKindOf, bytesOf, type ResponseHeaders } from '../metering/reader.ts';
import { SseEvents } from '../metering/sse.ts';

const FAILURE_KEYS = [Buffer.from('"error"'), Buffer.from('"isError"')];

/** Whether JSON text may say a request failed: one of the keys that can (a cheap filter before parsing). */
const maySayFailed = (bytes: Buffer) => FAILURE_KEYS.some((key) => bytes.includes(key));

type Json = Record<string, unknown>;
const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Whether a parsed JSON-RPC message (or batch) holds a failed response to request `rpcId`. */
export function failedResponseTo(message: unknown, rpcId: string | number): boolean {
  const responses = Array.isArray(message) ? message : [message];
  return responses.some(
    (response) =>
      isObject(response) &&
      response.id === rpcId &&
      !Object.hasOwn(response, 'method') &&
      (Object.hasOwn(response, 'error') || (isObject(response.result) && response.result.isError === true)),
  );
}

export type AnswerWatch = {
  onHeaders(headers: ResponseHeaders): void;
  onChunk(chunk: Uint8Array): void;
  onEnd(): void;
  /** Whether the response to the request, seen so far, said it failed. */
  failed(): boolean;
};

/** The watch of the answer to MCP request `rpcId`, holding at most `maxBytes`. */
export function watchAnswer(rpcId: string | number, maxBytes: number): AnswerWatch {
  let failed = false;
  const see = (text: string) => {
    if (failed) return;
    try {
      failed = failedResponseTo(JSON.parse(text), rpcId);
    } catch {
      // not JSON: says nothing
    }
  };
  let kind: ReturnType<typeof bodyKindOf> = 'unread';
  let events: SseEvents | undefined;
  const json = new BoundedBytes(maxBytes);
  return {
    onHeaders(headers) {
      kind = bodyKindOf(headers);
      if (kind === 'sse') events = new SseEvents(maxBytes, see, maySayFailed);
    },
    onChunk(chunk) {
      const bytes = bytesOf(chunk);
      if (kind === 'sse') events?.push(bytes);
      else if (kind === 'json') json.append(bytes);
    },
    onEnd() {
      if (kind === 'sse') events?.end();
      else if (kind === 'json' && !json.over) {
        const body = json.view();
        if (maySayFailed(body)) see(body.toString('utf8').replace(/^\uFEFF/, ''));
        json.reset();
      }
    },
    failed: () => failed,
  };
}
