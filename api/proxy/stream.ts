// POST /v1/proxy/{id}/stream: the same gate as the transactional endpoint, inline, then one
// undici request with the caller's body piped up and the upstream's answer piped down as
// bytes arrive (backpressure both ways, so memory does not grow with body size).
// - X-Gateway-Invocation-ID (and X-Request-ID) are set before any upstream byte is written.
// - Event streams get `X-Accel-Buffering: no` and their headers flushed at once.
// - The row is written as the call starts (in parallel with it: the first byte does not wait
//   for the database) and completed at the end with latency, TTFT and outcome; neither
//   write is waited for (records.ts queues them, group-committed).
// - emit_receipts: both bodies are hashed as they pass (nothing held) and the receipt is
//   signed at completion and stored in the completion's statement.
// - A caller that hangs up aborts the upstream call (caller_aborted); an upstream that dies
//   mid-stream cuts the caller's response short and is recorded failed (stream_interrupted).
// - Before the first byte: 502 unreachable/refused/blocked/circuit open, 504 timeout, with
//   coarse bodies that never name the upstream.
import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { Context } from 'koa';
import { errors as undiciErrors } from 'undici';
import type { Completion, StartedRow } from './records.ts';
import { newId } from '../../lib/ids.ts';
import { ApiError } from '../errors.ts';
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
import { outcomeStatus } from '../../activities/invocation.ts';
import { admit, runStages } from './gate.ts';
import { parseMcpBody } from './parse.ts';
import { arrivedBody, readCappedBody } from './body.ts';
import { recordedCallFields, type ProxyCall } from './call.ts';
import type { Invocation } from '../../gateway/db/entities.ts';
import { errorKind } from '../../lib/error-kind.ts';
import { insertBindingPayment } from '../../gateway/payment/claims.ts';
import { paymentHeadersOf, PAYMENT_RESPONSE_HEADER } from '../payment/dialect.ts';
import { withPaymentRequired } from '../payment/stage.ts';
import type { ProxyServices } from './services.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';
import { digestOf, digestOfEmitted, digestingBody, type BodyDigest } from './digest.ts';
import type { SignedReceipt } from '../../gateway/receipts/signer.ts';
import { receiptsIssued } from '../../lib/observability/metrics.ts';

/** An MCP body is one JSON-RPC request and must be read to be parsed; it is still capped. */
export const MAX_MCP_BODY = 32 * 1024 * 1024;

function contentLengthOf(value: string): number | null {
  return /^\d{1,15}$/.test(value) ? Number(value) : null;
}

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

export function streamRoute(deps: AppDeps, services: ProxyServices) {
  return async function stream(ctx: Context & { state: AuthState; params: Record<string, string> }): Promise<void> {
    const { tenantId, userId } = ctx.state.caller;
    const { agent, requestId, model } = await admit(ctx, deps, services);

    const declaredLength = contentLengthOf(ctx.get('content-length'));
    let body: Buffer | Readable;
    let mcp: ProxyCall['mcp'] = null;
    if (agent.protocol === 'mcp') {
      const held = services.bodyBudget.open(tenantId);
      ctx.res.once('close', held.release);
      body = await readCappedBody(ctx.req, MAX_MCP_BODY, deps.config.bodyPace, held);
      mcp = parseMcpBody(body);
    } else {
      // A small body is usually here whole already: sent as the bytes it is (body.ts).
      body = arrivedBody(ctx.req, declaredLength) ?? ctx.req;
    }
    const call: ProxyCall = {
      caller: ctx.state.caller,
      agent,
      mode: 'streaming',
      requestId,
      model,
      contentType: ctx.get('content-type') || null,
      // SPEC Limits: without Content-Length a streamed body counts as arbitrarily large.
      bodyBytes: Buffer.isBuffer(body) ? body.length : declaredLength,
      resourceUrl: `${ctx.protocol}://${ctx.host}${ctx.originalUrl}`,
      mcp,
      policyWarning: null,
      payment: null,
    };
    // The credential is resolved after policy and before payment: one that cannot be resolved
    // refuses the call before the payer is charged.
    let credentialHeaders: Record<string, string> = {};
    let credentialFailed = false;
    await runStages(
      deps,
      services,
      call,
      paymentHeadersOf((name) => ctx.get(name)),
      async () => {
        try {
          credentialHeaders = await services.credentials.headersFor(tenantId, agent.credentialRef);
        } catch {
          // A priced call is refused here, before the payment; a free one is recorded below.
          if (agent.pricing) throw new ApiError(502, coarseMessage('credential'));
          credentialFailed = true;
        }
      },
    );

    const invocationId = newId('inv');
    const gatewayHeaders: Record<string, string> = {
      'x-gateway-invocation-id': invocationId,
      'x-request-id': requestId,
    };
    if (call.policyWarning) gatewayHeaders['x-gateway-policy-warning'] = call.policyWarning;
    if (call.payment?.responseHeader)
      gatewayHeaders[PAYMENT_RESPONSE_HEADER[call.payment.dialect].toLowerCase()] = call.payment.responseHeader;
    ctx.set(gatewayHeaders);

    const now = new Date();
    const row: StartedRow = {
      id: invocationId,
      tenantId,
      agentId: agent.id,
      status: 'running',
      requestId,
      caller: userId,
      model,
      contentType: call.contentType,
      requestBytes: call.bodyBytes,
      ...recordedCallFields(call),
      createdAt: now,
    };
    // Rows are written off the latency path (records.ts: group commit, a completion that does
    // not depend on its start); what could not be written is logged, never the call's failure.
    // By kind: a database error may quote the row's values (lib/error-kind.ts).
    const logFailure = (err: Error) =>
      deps.log.error({ invocationId, err: errorKind(err) }, 'could not record streaming invocation');
    let requestDigest: BodyDigest | null = null;
    let responseDigest: ReturnType<typeof digestOfEmitted> | null = null;
    const complete = async (fields: Omit<Completion, 'id'>) => {
      const completedAt = new Date();
      const done = {
        ...row,
        ...fields,
        completedAt,
        requestSha256: requestDigest?.value() ?? null,
        responseSha256: responseDigest?.digest.value() ?? null,
        receipt: null as SignedReceipt | null,
      };
      if (agent.emitReceipts) {
        // Signed before the write and stored in its statement: row and receipt commit together.
        done.receipt = await services.signReceipt(done).catch((err: Error) => {
          deps.log.error({ invocationId, err: errorKind(err) }, 'could not sign streaming receipt');
          return null;
        });
      }
      services.recorder.complete(done).then(() => {
        if (done.receipt) receiptsIssued.inc({ kid: done.receipt.kid });
      }, logFailure);
    };

    if (credentialFailed) {
      await complete({
        status: 'failed',
        errorClass: 'credential',
        upstreamStatus: null,
        latencyMs: null,
        ttftMs: null,
        responseContentType: null,
      });
      throw new ApiError(502, coarseMessage('credential'));
    }

    if (call.payment) {
      // A paid call binds its payment to its row, in one transaction, before anything is
      // forwarded (402 if already bound): an unbound claim would let the same payment header
      // buy another call.
      try {
        await insertBindingPayment(
          deps.orm.em,
          { ...row, mode: 'streaming', attempts: 1, requestHeaders: {}, updatedAt: now } as Invocation,
          call.payment,
        );
      } catch (err) {
        throw withPaymentRequired(deps, call, err);
      }
    }
    // Written as the call starts, beside it (for a paid call, the start only adds its owner):
    // sent within records.ts's START_DELAY_MS with the starts of other calls, or replaced by
    // the whole row if the call ends first, and not waited for (holding the head until it was
    // sent cost c=1 throughput; docs/PROXY.md).
    services.recorder.start(row).catch(logFailure);

    if (agent.emitReceipts) {
      if (Buffer.isBuffer(body)) requestDigest = digestOf(body);
      else ({ body, digest: requestDigest } = digestingBody(body));
    }

    const hangup = new AbortController();
    const onClose = () => {
      if (!ctx.res.writableFinished) hangup.abort();
    };
    ctx.res.once('close', onClose);

    const headers: Record<string, string> = {
      ...forwardableHeaders(ctx.req.headers),
      ...credentialHeaders,
      'x-request-id': requestId,
    };
    // The caller's body goes up unchanged, so its declared length still holds.
    if (!Buffer.isBuffer(body) && declaredLength !== null) headers['content-length'] = String(declaredLength);

    let reply: UpstreamResponse;
    try {
      reply = await services.upstream.open({
        url: agent.upstreamUrl!,
        headers,
        body,
        deadlineMs: deps.config.upstream.timeoutMs,
        deadlineCoversBody: false,
        idleTimeoutMs: deps.config.upstream.timeoutMs,
        signal: hangup.signal,
        resendAllowed: agent.retryNonIdempotent,
        tenantId: call.caller.tenantId,
      });
    } catch (err) {
      const errorClass: ErrorClass = err instanceof UpstreamError ? err.errorClass : classifyError(err).errorClass;
      ctx.res.off('close', onClose);
      await complete({
        status: 'failed',
        errorClass,
        upstreamStatus: null,
        latencyMs: null,
        ttftMs: null,
        responseContentType: null,
      });
      if (errorClass === 'caller_aborted') {
        ctx.respond = false; // nobody is left to answer
        return;
      }
      throw new ApiError(statusForClass(errorClass), coarseMessage(errorClass));
    }

    const res = ctx.res;
    ctx.respond = false;
    const out: Record<string, string | string[]> = { ...forwardableResponseHeaders(reply.headers), ...gatewayHeaders };
    const contentType = String(reply.headers['content-type'] ?? '');
    const eventStream = /^text\/event-stream/i.test(contentType);
    if (eventStream) out['x-accel-buffering'] = 'no';
    res.writeHead(reply.status, out);
    if (eventStream) res.flushHeaders();

    let firstByteAt: number | null = null;
    reply.body.once('data', () => {
      firstByteAt = performance.now();
    });
    if (agent.emitReceipts) responseDigest = digestOfEmitted(reply.body);
    const ended = await pipeDown(reply.body, res);
    responseDigest?.finish(ended.by === 'done');
    reply.finish();
    res.off('close', onClose);
    const failure: ErrorClass | null =
      ended.by === 'done'
        ? null
        : ended.by === 'caller'
          ? 'caller_aborted'
          : ended.err instanceof undiciErrors.BodyTimeoutError
            ? 'timeout'
            : 'stream_interrupted';
    const end = performance.now();
    await complete({
      status: failure ? 'failed' : outcomeStatus(reply.status),
      upstreamStatus: reply.status,
      errorClass: failure ?? classForStatus(reply.status),
      latencyMs: Math.round(end - reply.startedAt),
      ttftMs: Math.round((firstByteAt ?? end) - reply.startedAt),
      responseContentType: contentType || null,
    });
  };
}
