// A member call served in this process without a network hop: the request a virtual MCP server
// would POST to its own listener (/v1/proxy/{member}/stream) is handed to the same Koa
// application as an in-memory request and answered into an in-memory response, so it passes
// exactly what a direct call passes (the invoke fast path's layers: span, request id, access
// line, error mapping, authentication; then admission: rate limits, policy, budget, price,
// payment, credential; the invocation row, the relay) and none of the door's logic is copied.
// What it saves is the loopback connection's cost: the client's HTTP request and parse of the
// answer, the kernel's copies, the server's parse of the request and serialization of the
// answer (about a third of what the federation added to a call; docs/BENCHMARKS.md).
// No library serves a Koa app from memory with streaming both ways (light-my-request buffers
// the whole answer, which would hold a relayed event stream), hence these two small classes.
import { EventEmitter } from 'node:events';
import { IncomingMessage, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import { PassThrough, Writable } from 'node:stream';
import type Koa from 'koa';

/** What the member's endpoint answered: its status, headers, and its body as it comes. */
export type InProcessReply = { statusCode: number; headers: IncomingHttpHeaders; body: PassThrough };

/** The connection both halves claim to be on: the outer request's addresses, always open. */
function fakeSocket(from: Socket): Socket {
  return Object.assign(new EventEmitter(), {
    remoteAddress: from.remoteAddress,
    remotePort: from.remotePort,
    remoteFamily: from.remoteFamily,
    localAddress: from.localAddress,
    localPort: from.localPort,
    readable: false,
    writable: true,
    destroyed: false,
    setTimeout: () => undefined,
    setNoDelay: () => undefined,
    setKeepAlive: () => undefined,
    destroy: () => undefined,
    resume: () => undefined,
    pause: () => undefined,
  }) as unknown as Socket;
}

/** The ServerResponse surface Koa, on-finished and the stream relay use, written into `body`. */
class MemoryResponse extends Writable {
  statusCode = 200;
  statusMessage = '';
  headersSent = false;
  sendDate = false;
  readonly socket: Socket;
  readonly connection: Socket;
  readonly req: IncomingMessage;
  private readonly fields = new Map<string, { name: string; value: number | string | string[] }>();
  private readonly body: PassThrough;
  private readonly onHead: (status: number, headers: IncomingHttpHeaders) => void;
  constructor(
    req: IncomingMessage,
    socket: Socket,
    body: PassThrough,
    onHead: (status: number, headers: IncomingHttpHeaders) => void,
  ) {
    super({ highWaterMark: 64 * 1024 });
    this.req = req;
    this.socket = socket;
    this.connection = socket;
    this.body = body;
    this.onHead = onHead;
  }
  /** on-finished (Koa) reads this as ServerResponse's. */
  get finished(): boolean {
    return this.writableEnded;
  }
  setHeader(name: string, value: number | string | readonly string[]): this {
    if (this.headersSent) throw Object.assign(new Error('headers already sent'), { code: 'ERR_HTTP_HEADERS_SENT' });
    this.fields.set(name.toLowerCase(), { name, value: Array.isArray(value) ? [...value] : (value as string) });
    return this;
  }
  getHeader(name: string) {
    return this.fields.get(name.toLowerCase())?.value;
  }
  getHeaders(): OutgoingHttpHeaders {
    return Object.fromEntries([...this.fields].map(([key, { value }]) => [key, value]));
  }
  getHeaderNames(): string[] {
    return [...this.fields.keys()];
  }
  hasHeader(name: string): boolean {
    return this.fields.has(name.toLowerCase());
  }
  removeHeader(name: string): void {
    this.fields.delete(name.toLowerCase());
  }
  writeHead(status: number, reason?: string | OutgoingHttpHeaders, headers?: OutgoingHttpHeaders): this {
    this.statusCode = status;
    const given = typeof reason === 'object' ? reason : headers;
    if (typeof reason === 'string') this.statusMessage = reason;
    for (const [name, value] of Object.entries(given ?? {}))
      if (value !== undefined) this.setHeader(name, value as string | string[]);
    this.sendHead();
    return this;
  }
  flushHeaders(): void {
    this.sendHead();
  }
  /** In-memory answers carry no trailers (a member call never asks for them: no `TE: trailers`). */
  addTrailers(): void {}
  private sendHead(): void {
    if (this.headersSent) return;
    this.headersSent = true;
    const headers: IncomingHttpHeaders = {};
    for (const [key, { value }] of this.fields) headers[key] = typeof value === 'number' ? String(value) : value;
    this.onHead(this.statusCode, headers);
  }
  override _write(chunk: Buffer, _encoding: BufferEncoding, done: (err?: Error | null) => void): void {
    this.sendHead();
    if (this.body.write(chunk)) done();
    else this.body.once('drain', () => done());
  }
  override _final(done: (err?: Error | null) => void): void {
    this.sendHead();
    this.body.end();
    done();
  }
  override _destroy(err: Error | null, done: (err?: Error | null) => void): void {
    if (!this.writableFinished) this.body.destroy(err ?? undefined);
    done(err);
  }
}

/** The application's request handler, composed once per application. */
const handlers = new WeakMap<Koa, ReturnType<Koa['callback']>>();

/**
 * POSTs `body` to `path` of `app` in memory, as a request on `socket`'s connection would; resolves
 * with the answer's head (its body streams on), rejects when `signal` aborts first. The body's
 * reader going away (destroyed before its end) is a hang-up, as a closed connection would be.
 */
export function postInProcess(
  app: Koa,
  socket: Socket,
  path: string,
  headers: Record<string, string>,
  body: Buffer,
  signal?: AbortSignal,
): Promise<InProcessReply> {
  let handle = handlers.get(app);
  if (!handle) handlers.set(app, (handle = app.callback()));
  const fake = fakeSocket(socket);
  const req = new IncomingMessage(fake);
  req.method = 'POST';
  req.url = path;
  req.httpVersion = '1.1';
  req.httpVersionMajor = 1;
  req.httpVersionMinor = 1;
  req.headers = { ...headers, 'content-length': String(body.length) };
  req.rawHeaders = Object.entries(req.headers).flatMap(([name, value]) => [name, String(value)]);
  req.push(body);
  req.push(null);
  req.complete = true;

  const answer = new PassThrough({ highWaterMark: 64 * 1024 });
  return new Promise<InProcessReply>((resolve, reject) => {
    let answered = false;
    const res = new MemoryResponse(req, fake, answer, (statusCode, head) => {
      answered = true;
      resolve({ statusCode, headers: head, body: answer });
    });
    // Ended by the handler (its last bytes may still be on their way to the reader): not a hang-up.
    const hangUp = () => {
      if (!res.writableEnded) res.destroy();
    };
    answer.once('close', hangUp);
    const onAbort = () => {
      hangUp();
      answer.destroy(signal?.reason as Error);
      reject(signal?.reason as Error);
    };
    if (signal?.aborted) return onAbort();
    signal?.addEventListener('abort', onAbort, { once: true });
    answer.once('close', () => signal?.removeEventListener('abort', onAbort));
    void handle(req, res as unknown as Parameters<typeof handle>[1]).then(() => {
      // An answer Koa left to the handler that never wrote one (its caller gone): nothing to read.
      if (!answered) reject(new Error('the member call ended without an answer'));
    }, reject);
  });
}
