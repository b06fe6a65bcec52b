// The upstream HTTP client (undici), shared by the transactional activity and the streaming
// route. Redirects are never followed; errors are classified, never passed through raw, so
// no upstream address or internal detail reaches a caller or a workflow history.
import { Agent, request, errors as undiciErrors } from 'undici';

export type ErrorClass = 'timeout' | 'connect' | 'upstream_5xx' | 'upstream_4xx' | 'circuit_open' | 'interrupted' | 'protocol' | 'aborted';

export type UpstreamRequest = {
  url: string;
  method: string;
  headers: Record<string, string>;
  body?: Buffer;
  timeoutMs: number;
  signal?: AbortSignal;
};

export type UpstreamReply = {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
  ttftMs: number;
  latencyMs: number;
};

export class UpstreamError extends Error {
  readonly errorClass: ErrorClass;
  constructor(errorClass: ErrorClass, message: string) {
    super(message);
    this.errorClass = errorClass;
  }
}

export function createUpstreamDispatcher(): Agent {
  return new Agent({ keepAliveTimeout: 10_000, connections: 128, connect: { timeout: 10_000 } });
}

/** Classifies anything undici throws into the gateway's error classes. */
export function classifyError(err: unknown): ErrorClass {
  if (err instanceof UpstreamError) return err.errorClass;
  const code = (err as { code?: string }).code ?? '';
  if (err instanceof undiciErrors.HeadersTimeoutError || err instanceof undiciErrors.BodyTimeoutError) return 'timeout';
  if (code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'ETIMEDOUT') return 'timeout';
  if ((err as Error).name === 'TimeoutError') return 'timeout';
  if ((err as Error).name === 'AbortError' || code === 'UND_ERR_ABORTED') return 'aborted';
  if (['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_SOCKET', 'EPIPE'].includes(code)) return 'connect';
  return 'connect';
}

export async function callUpstream(dispatcher: Agent, req: UpstreamRequest): Promise<UpstreamReply> {
  const started = performance.now();
  const timeout = AbortSignal.timeout(req.timeoutMs);
  const signal = req.signal ? AbortSignal.any([req.signal, timeout]) : timeout;
  try {
    const res = await request(req.url, {
      dispatcher,
      method: req.method as 'POST',
      headers: req.headers,
      body: req.body,
      signal,
      maxRedirections: 0,
      headersTimeout: req.timeoutMs,
      bodyTimeout: req.timeoutMs,
    } as Parameters<typeof request>[1]);
    const ttftMs = Math.round(performance.now() - started);
    const body = Buffer.from(await res.body.arrayBuffer());
    return { status: res.statusCode, headers: res.headers, body, ttftMs, latencyMs: Math.round(performance.now() - started) };
  } catch (err) {
    if (timeout.aborted) throw new UpstreamError('timeout', 'upstream timed out');
    throw new UpstreamError(classifyError(err), 'upstream unreachable');
  }
}
