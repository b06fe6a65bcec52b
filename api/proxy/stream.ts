// POST /v1/proxy/{id}/stream: the same gate as the transactional endpoint, inline, then one
// undici request with the caller's body piped up and the upstream's answer piped down as
// bytes arrive (backpressure both ways, so memory does not grow with body size).
// - X-Gateway-Invocation-ID (and X-Request-ID) are set before any upstream byte is written.
// - Event streams get `X-Accel-Buffering: no` and their headers flushed at once.
// - The row is written as the call starts (in parallel with it: the first byte does not wait
//   for the database) and completed at the end with latency, TTFT and outcome; neither
//   write is waited for (gateway/invocations/stream-records.ts queues them, group-committed).
// - emit_receipts: both bodies are hashed as they pass (nothing held) and the receipt is
//   signed at completion and stored in the completion's statement.
// - A caller that hangs up aborts the upstream call (caller_aborted); an upstream that dies
//   mid-stream cuts the caller's response short and is recorded failed (stream_interrupted).
// - Before the first byte: 502 unreachable/refused/blocked/circuit open, 504 timeout, with
//   coarse bodies that never name the upstream.
// streamRoute reads as its stages, in order: admitCall, passStages, setGatewayHeaders, the row
// (callRecord), bindPayment and setPaymentResponse, the upstream request, then relay or answerUnreached.
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { errors as undiciErrors } from 'undici';
import type { Completion, StartedRow } from '../../gateway/invocations/stream-records.ts';
import { newId } from '../../lib/ids.ts';
import { ApiError } from '../errors.ts';
import { publicRequestUrl } from '../public-url.ts';
import { forwardableHeaders, forwardableResponseHeaders } from '../../gateway/upstream/headers.ts';
import {
  UpstreamError,
  classForStatus,
  classifyError,
  coarseMessage,
  statusForClass,
  type ErrorClass,
} from '../../gateway/upstream/errors.ts';
import type { UpstreamResponse } from '../../gateway/upstream/client.ts';
import { outcomeStatus } from '../../gateway/invocations/outcome.ts';
import { cheapToParse, refundIfRefused, runStages, type Admitted, type Door, type GateCtx } from './gate.ts';
import { parseMcpBody } from './parse.ts';
import { checkTaskBinding, parseA2aBody } from './a2a-parse.ts';
import { a2aAnswerTap, a2aAnswered } from './a2a-tap.ts';
import { mcpReceiptInjector } from './mcp-receipt.ts';
import { arrivedBody, contentLengthOf, declaredOver, readCappedBody } from './body.ts';
import { recordedCallFields, type ProxyCall } from './call.ts';
import type { Invocation } from '../../gateway/db/entities.ts';
import { errorKind } from '../../lib/error-kind.ts';
import { insertBindingPayment } from '../../gateway/payment/claims.ts';
import { isChargeable } from '../payment/requirements.ts';
import { PAYMENT_RESPONSE_HEADER } from '../payment/dialect.ts';
import { stillSettling, withPaymentRequired } from '../payment/stage.ts';
import { closeUnforwarded } from '../../gateway/invocations/stale-streams.ts';
import type { ProxyServices } from './services.ts';
import type { AppDeps } from '../deps.ts';
import { digestOf, digestOfEmitted, digestingBody, type BodyDigest } from './digest.ts';
import type { SignedReceipt } from '../../gateway/receipts/signer.ts';
import { receiptsIssued, recordUpstreamOutcome } from '../../gateway/metrics.ts';

/** An MCP body is one JSON-RPC request and must be read to be parsed; it is still capped. */
const MAX_MCP_BODY = 32 * 1024 * 1024;

type PipeEnd = { by: 'done' } | { by: 'caller' } | { by: 'upstream'; err: unknown };

/**
 * Pipes the upstream body to the caller with backpressure and reports who ended it first.
 * Unlike stream.pipeline, a broken side is destroyed without an error object, so the
 * framework does not log a routine hang-up as a server error.
 */
function pipeDown(source: Readable, res: ServerResponse): Promise<PipeEnd> {
  return new Promise((resolve) => {
    let settled = false;
    const settle = (end: PipeEnd) => {
      if (settled) return;
      settled = true;
      resolve(end);
    };
    source.on('error', (err) => {
      // The caller must see a broken response, not a short one that looks whole.
      if (!settled) res.destroy();
      settle({ by: 'upstream', err });
    });
    res.once('close', () => {
      if (res.writableFinished) return settle({ by: 'done' });
      source.destroy();
      settle({ by: 'caller' });
    });
    res.once('finish', () => settle({ by: 'done' }));
    source.pipe(res);
  });
}

type StreamCtx = GateCtx;

/** A JSON-RPC body (MCP, A2A) is read to be parsed, within the same cap. */
function readJsonRpcBody(ctx: StreamCtx, deps: AppDeps, services: ProxyServices, admitted: Admitted): Promise<Buffer> {
  const held = services.bodyBudget.open(admitted.caller.tenantId);
  ctx.res.once('close', held.release);
  return refundIfRefused(
    admitted,
    413,
    () => readCappedBody(ctx.req, MAX_MCP_BODY, deps.config.bodyPace, held),
    () => declaredOver(ctx.req, MAX_MCP_BODY),
  );
}

/** The call as the gate sees it: admitted, its body (read when MCP must parse it) and its facts. */
async function admitCall(
  ctx: StreamCtx,
  deps: AppDeps,
  services: ProxyServices,
  door: Door,
): Promise<{ call: ProxyCall; admitted: Admitted; body: Buffer | Readable; declaredLength: number | null }> {
  const admitted = await door.admit(ctx);
  const { agent, requestId, model } = admitted;
  const declaredLength = contentLengthOf(ctx.get('content-length'));
  let body: Buffer | Readable;
  let mcp: ProxyCall['mcp'] = null;
  let a2a: ProxyCall['a2a'] = null;
  if (agent.protocol === 'a2a') {
    body = await readJsonRpcBody(ctx, deps, services, admitted);
    const read = body;
    a2a = await refundIfRefused(
      admitted,
      400,
      () => parseA2aBody(read, agent, 'streaming'),
      () => cheapToParse(read),
    );
  } else if (agent.protocol === 'mcp') {
    const held = services.bodyBudget.open(admitted.caller.tenantId);
    ctx.res.once('close', held.release);
    const read = await refundIfRefused(
      admitted,
      413,
      () => readCappedBody(ctx.req, MAX_MCP_BODY, deps.config.bodyPace, held),
      () => declaredOver(ctx.req, MAX_MCP_BODY),
    );
    mcp = await refundIfRefused(
      admitted,
      400,
      () => parseMcpBody(read),
      () => cheapToParse(read),
    );
    // A payment in `_meta` is never forwarded: the body goes up without it (parse.ts).
    body = mcp.forwardBody ?? read;
  } else {
    // A small body is usually here whole already: sent as the bytes it is (body.ts).
    body = arrivedBody(ctx.req, declaredLength) ?? ctx.req;
  }
  const call: ProxyCall = {
    invocationId: newId('inv'),
    caller: admitted.caller,
    agent,
    mode: 'streaming',
    requestId,
    model,
    contentType: ctx.get('content-type') || null,
    // docs/API.md "Limits": without Content-Length a streamed body counts as arbitrarily large.
    bodyBytes: Buffer.isBuffer(body) ? body.length : declaredLength,
    resourceUrl: publicRequestUrl(ctx, deps.config.publicAddress),
    mcp,
    a2a,
    policyWarning: null,
    payment: null,
  };
  await checkTaskBinding(services.a2aTasks, call);
  return { call, admitted, body, declaredLength };
}

/**
 * Policy and payment, with the credential resolved between them: one that cannot be resolved
 * refuses a priced call before the payer is charged. Null when a free call's credential
 * failed (recorded by the caller).
 */
async function passStages(
  ctx: StreamCtx,
  deps: AppDeps,
  services: ProxyServices,
  call: ProxyCall,
  admitted: Admitted,
): Promise<Record<string, string> | null> {
  let credentialHeaders: Record<string, string> | null = {};
  await runStages(ctx, deps, services, call, admitted, async () => {
    try {
      credentialHeaders = await services.credentials.headersFor(call.caller.tenantId, call.agent.credentialRef);
    } catch {
      // A priced call is refused here, before the payment; a free one is recorded below.
      if (isChargeable(call)) throw new ApiError(502, coarseMessage('credential'));
      credentialHeaders = null;
    }
  });
  return credentialHeaders;
}

/** The gateway's own response headers, set now so that every answer carries them. */
function setGatewayHeaders(ctx: StreamCtx, call: ProxyCall, invocationId: string): Record<string, string> {
  const gatewayHeaders: Record<string, string> = {
    'x-gateway-invocation-id': invocationId,
    'x-request-id': call.requestId,
  };
  if (call.policyWarning) gatewayHeaders['x-gateway-policy-warning'] = call.policyWarning;
  ctx.set(gatewayHeaders);
  return gatewayHeaders;
}

/**
 * The receipt of the call's settled payment, set once the payment is bound to this call: a
 * concurrent request with the same payment that bound it first makes this one a 402, which
 * never carries a receipt (the error mapper also strips one from any 402).
 */
function setPaymentResponse(ctx: StreamCtx, call: ProxyCall, gatewayHeaders: Record<string, string>): void {
  if (!call.payment?.responseHeader) return;
  const name = PAYMENT_RESPONSE_HEADER[call.payment.dialect].toLowerCase();
  gatewayHeaders[name] = call.payment.responseHeader;
  ctx.set(name, call.payment.responseHeader);
}

function startedRow(call: ProxyCall, invocationId: string, now: Date): StartedRow {
  return {
    id: invocationId,
    tenantId: call.caller.tenantId,
    agentId: call.agent.id,
    status: 'running',
    requestId: call.requestId,
    caller: call.caller.userId,
    callerKind: call.caller.kind,
    model: call.model,
    contentType: call.contentType,
    requestBytes: call.bodyBytes,
    ...recordedCallFields(call),
    createdAt: now,
  };
}

/**
 * The call's row, written off the latency path (gateway/invocations/stream-records.ts: group commit, a completion that does
 * not depend on its start): what could not be written is logged, never the call's failure. With
 * emit_receipts, the digests taken while piping go into a receipt signed as the call completes.
 */
function callRecord(deps: AppDeps, services: ProxyServices, call: ProxyCall, row: StartedRow) {
  const digests = {
    request: null as BodyDigest | null,
    response: null as ReturnType<typeof digestOfEmitted> | null,
  };
  // By kind: a database error may quote the row's values (lib/error-kind.ts).
  const logFailure = (err: Error) =>
    deps.log.error({ invocationId: row.id, err: errorKind(err) }, 'could not record streaming invocation');
  const complete = async (fields: Omit<Completion, 'id'>) => {
    recordUpstreamOutcome('streaming', fields.errorClass, fields.latencyMs);
    const completedAt = new Date();
    const done = {
      ...row,
      ...fields,
      completedAt,
      requestSha256: digests.request?.value() ?? null,
      responseSha256: digests.response?.digest.value() ?? null,
      receipt: null as SignedReceipt | null,
    };
    if (call.agent.emitReceipts) {
      // Signed before the write and stored in its statement: row and receipt commit together.
      done.receipt = await services.signReceipt(done).catch((err: Error) => {
        deps.log.error({ invocationId: row.id, err: errorKind(err) }, 'could not sign streaming receipt');
        return null;
      });
    }
    services.recorder.complete(done).then(() => {
      if (done.receipt) receiptsIssued.inc({ kid: done.receipt.kid });
    }, logFailure);
  };
  return { digests, logFailure, complete };
}

type CallRecord = ReturnType<typeof callRecord>;

/** A call that failed before any upstream byte: no status, no timings. */
function failedBeforeUpstream(errorClass: ErrorClass): Omit<Completion, 'id'> {
  return {
    status: 'failed',
    errorClass,
    upstreamStatus: null,
    latencyMs: null,
    ttftMs: null,
    responseContentType: null,
  };
}

/** How long a paid call waits for its forwarding mark before it gives its payment back. */
const MARK_DEADLINE_MS = 10_000;

/**
 * A paid call binds its payment to its row, in one transaction, before anything is forwarded
 * (402 if already bound): an unbound claim would let the same payment header buy another call.
 * The row is inserted counting no attempt and forwarded only once its forwarding mark (owner
 * and attempt) has committed: a process lost in between leaves a row known never to have
 * reached the upstream, whose payment the lost-stream sweep releases. A mark that fails, or
 * finds the row already closed by that sweep, forwards nothing: the payment is released and
 * the payer told to resend the same header.
 */
async function bindPayment(deps: AppDeps, services: ProxyServices, call: ProxyCall, row: StartedRow): Promise<void> {
  try {
    await insertBindingPayment(
      deps.orm.em,
      { ...row, mode: 'streaming', attempts: 0, requestHeaders: {}, updatedAt: row.createdAt } as Invocation,
      call.payment!,
    );
  } catch (err) {
    throw withPaymentRequired(deps, call, err);
  }
  let timer: NodeJS.Timeout | undefined;
  const marked = await Promise.race([
    services.recorder.markForwarding(row.id),
    new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), MARK_DEADLINE_MS))),
  ]).catch((err: unknown) => {
    deps.log.warn({ invocationId: row.id, err: errorKind(err) }, 'could not mark a paid stream forwarding');
    return false;
  });
  clearTimeout(timer);
  if (marked) return;
  await closeUnforwarded(deps.orm, row.id).catch((err: unknown) =>
    deps.log.error({ invocationId: row.id, err: errorKind(err) }, 'could not release an unforwarded payment'),
  );
  throw stillSettling();
}

/** Aborts the upstream call when the caller hangs up before the response is done. */
function watchHangup(res: ServerResponse): { signal: AbortSignal; stop(): void } {
  const hangup = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) hangup.abort();
  };
  res.once('close', onClose);
  return { signal: hangup.signal, stop: () => res.off('close', onClose) };
}

function upstreamHeaders(
  ctx: StreamCtx,
  call: ProxyCall,
  credentialHeaders: Record<string, string>,
  body: Buffer | Readable,
  declaredLength: number | null,
): Record<string, string> {
  const headers: Record<string, string> = {
    ...forwardableHeaders(ctx.req.headers),
    ...credentialHeaders,
    'x-request-id': call.requestId,
  };
  // An A2A answer is watched for the tasks it names, which are bound as it passes (a2a-tap.ts):
  // the gateway cannot read a compressed one, so it asks for it uncompressed.
  if (call.a2a) headers['accept-encoding'] = 'identity';
  // The caller's body goes up unchanged, so its declared length still holds.
  if (!Buffer.isBuffer(body) && declaredLength !== null) headers['content-length'] = String(declaredLength);
  return headers;
}

/** The upstream could not be reached: recorded, then 502/504, or nothing when the caller is gone. */
async function answerUnreached(ctx: StreamCtx, record: CallRecord, err: unknown): Promise<void> {
  const errorClass: ErrorClass = err instanceof UpstreamError ? err.errorClass : classifyError(err).errorClass;
  await record.complete(failedBeforeUpstream(errorClass));
  if (errorClass === 'caller_aborted') {
    ctx.respond = false; // nobody is left to answer
    return;
  }
  throw new ApiError(statusForClass(errorClass), coarseMessage(errorClass));
}

/** Pipes the upstream's answer down as it arrives; returns the outcome to record. */
async function relay(
  ctx: StreamCtx,
  call: ProxyCall,
  reply: UpstreamResponse,
  gatewayHeaders: Record<string, string>,
  record: CallRecord,
  hangup: { stop(): void },
  tap: ((source: Readable) => Readable) | null,
): Promise<Omit<Completion, 'id'>> {
  const res = ctx.res;
  ctx.respond = false;
  const out: Record<string, string | string[]> = { ...forwardableResponseHeaders(reply.headers), ...gatewayHeaders };
  // An MCP-transport payment's receipt goes into the JSON-RPC result (mcp-receipt.ts).
  const injectReceipt = mcpReceiptInjector(call, reply.headers);
  if (injectReceipt) delete out['content-length'];
  const contentType = String(reply.headers['content-type'] ?? '');
  const eventStream = /^text\/event-stream/i.test(contentType);
  if (eventStream) out['x-accel-buffering'] = 'no';
  res.writeHead(reply.status, out);
  if (eventStream) res.flushHeaders();

  let firstByteAt: number | null = null;
  reply.body.once('data', () => {
    firstByteAt = performance.now();
  });
  const received = injectReceipt ? injectReceipt(reply.body) : reply.body;
  // An A2A answer is watched for the tasks it names, which are bound as they pass (a2a-tap.ts).
  const source = tap ? tap(received) : received;
  if (call.agent.emitReceipts) record.digests.response = digestOfEmitted(source);
  const ended = await pipeDown(source, res);
  record.digests.response?.finish(ended.by === 'done');
  reply.finish();
  hangup.stop();
  const failure: ErrorClass | null =
    ended.by === 'done'
      ? null
      : ended.by === 'caller'
        ? 'caller_aborted'
        : ended.err instanceof undiciErrors.BodyTimeoutError
          ? 'timeout'
          : 'stream_interrupted';
  const end = performance.now();
  return {
    status: failure ? 'failed' : outcomeStatus(reply.status),
    upstreamStatus: reply.status,
    errorClass: failure ?? classForStatus(reply.status),
    latencyMs: Math.round(end - reply.startedAt),
    ttftMs: Math.round((firstByteAt ?? end) - reply.startedAt),
    responseContentType: contentType || null,
  };
}

/** POST of a streaming call, at either door (gate.ts Door). */
export function streamRoute(deps: AppDeps, services: ProxyServices, door: Door) {
  return async function stream(ctx: StreamCtx): Promise<void> {
    const admitted = await admitCall(ctx, deps, services, door);
    const { call, declaredLength } = admitted;
    const credentialHeaders = await passStages(ctx, deps, services, call, admitted.admitted);
    const { invocationId } = call;
    const gatewayHeaders = setGatewayHeaders(ctx, call, invocationId);
    const row = startedRow(call, invocationId, new Date());
    const record = callRecord(deps, services, call, row);

    if (credentialHeaders === null) {
      await record.complete(failedBeforeUpstream('credential'));
      throw new ApiError(502, coarseMessage('credential'));
    }
    if (call.payment) {
      await bindPayment(deps, services, call, row);
      setPaymentResponse(ctx, call, gatewayHeaders);
    }
    // Written as the call starts, beside it (a paid call's row is written and owned already):
    // sent within stream-records.ts's START_DELAY_MS with the starts of other calls, or replaced by
    // the whole row if the call ends first, and not waited for (holding the head until it was
    // sent cost c=1 throughput; docs/PROXY.md).
    else services.recorder.start(row).catch(record.logFailure);

    let body = admitted.body;
    if (call.agent.emitReceipts) {
      if (Buffer.isBuffer(body)) record.digests.request = digestOf(body);
      else ({ body, digest: record.digests.request } = digestingBody(body));
    }

    const hangup = watchHangup(ctx.res);
    let reply: UpstreamResponse;
    try {
      reply = await services.upstream.open({
        url: call.agent.upstreamUrl!,
        headers: upstreamHeaders(ctx, call, credentialHeaders, body, declaredLength),
        body,
        deadlineMs: deps.config.upstream.timeoutMs,
        deadlineCoversBody: false,
        idleTimeoutMs: deps.config.upstream.timeoutMs,
        signal: hangup.signal,
        resendAllowed: call.agent.retryNonIdempotent,
        tenantId: call.caller.tenantId,
      });
    } catch (err) {
      hangup.stop();
      return answerUnreached(ctx, record, err);
    }
    // The answer holds its tenant's connection slot until its body closes: one that cannot be relayed is closed here.
    const tap = a2aAnswerTap(call, reply.headers, services.a2aTasks, deps.log);
    const outcome = await relay(ctx, call, reply, gatewayHeaders, record, hangup, tap).catch((err: unknown) => {
      reply.body.destroy();
      reply.finish();
      throw err;
    });
    await record.complete({ ...outcome, ...a2aAnswered(call) });
  };
}
