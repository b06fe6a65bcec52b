// POST /v1/proxy/{id}/stream (and a public agent's /stream): the same gate as the transactional
// endpoint, then one undici request with the caller's body piped up and the upstream's answer
// piped down as bytes arrive (backpressure both ways, so memory does not grow with body size).
// The route reads the request and passes the gate (stream-admit.ts), records the call beside it
// (stream-record.ts), calls the upstream and writes its answer (stream-relay.ts).
// X-Gateway-Invocation-ID, X-Request-ID, the policy warning and a payment's receipt are set
// before any upstream byte is written.
import type { Readable } from 'node:stream';
import { ApiError } from '../errors.ts';
import { forwardedHeadersOf } from './a2a-x402.ts';
import { coarseMessage } from './upstream-failure.ts';
import type { UpstreamResponse } from '../../gateway/upstream/client.ts';
import type { Door, GateCtx } from './gate.ts';
import type { ProxyCall } from './call.ts';
import { PAYMENT_RESPONSE_HEADER } from '../payment/dialect.ts';
import type { ProxyServices } from './services.ts';
import type { AppDeps } from '../deps.ts';
import { admitStream } from './stream-admit.ts';
import { bindPayment, failedBeforeUpstream, streamRecord } from './stream-record.ts';
import { answerUnreached, relay, watchHangup } from './stream-relay.ts';
import { a2aAnswerTap, a2aAnswered } from './a2a.ts';

/**
 * The gateway's own response headers, set now so that every answer carries them. The receipt
 * of a settled payment is set once the payment is bound to this call: a concurrent request with
 * the same payment that bound it first makes this one a 402, which never carries a receipt.
 */
function gatewayHeadersOf(call: ProxyCall): Record<string, string> {
  const headers: Record<string, string> = {
    'x-gateway-invocation-id': call.invocationId,
    'x-request-id': call.requestId,
  };
  if (call.policyWarning) headers['x-gateway-policy-warning'] = call.policyWarning;
  return headers;
}

function upstreamHeaders(
  ctx: GateCtx,
  call: ProxyCall,
  credentialHeaders: Record<string, string>,
  body: Buffer | Readable,
  declaredLength: number | null,
): Record<string, string> {
  const headers: Record<string, string> = {
    ...forwardedHeadersOf(ctx, call),
    ...credentialHeaders,
    'x-request-id': call.requestId,
  };
  // An A2A answer is watched for the tasks it names, which are bound as it passes (a2a.ts):
  // the gateway cannot read a compressed one, so it asks for it uncompressed.
  if (call.a2a) headers['accept-encoding'] = 'identity';
  // The caller's body goes up unchanged, so its declared length still holds.
  if (!Buffer.isBuffer(body) && declaredLength !== null) headers['content-length'] = String(declaredLength);
  return headers;
}

/** POST of a streaming call, at either door (gate.ts Door). */
export function streamRoute(deps: AppDeps, services: ProxyServices, door: Door) {
  return async function stream(ctx: GateCtx): Promise<void> {
    const { call, body: received, declaredLength, credentialHeaders } = await admitStream(ctx, deps, services, door);
    const gatewayHeaders = gatewayHeadersOf(call);
    ctx.set(gatewayHeaders);
    const record = streamRecord(deps, services, call);

    if (credentialHeaders === null) {
      await record.complete(failedBeforeUpstream('credential'));
      throw new ApiError(502, coarseMessage('credential'));
    }
    if (call.payment) {
      await bindPayment(deps, services, call, record.row);
      if (call.payment.responseHeader) {
        const name = PAYMENT_RESPONSE_HEADER[call.payment.dialect].toLowerCase();
        gatewayHeaders[name] = call.payment.responseHeader;
        ctx.set(name, call.payment.responseHeader);
      }
    } else record.start();

    const body = record.hashRequest(received);
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
    const outcome = await relay(ctx, call, reply, gatewayHeaders, record, tap)
      .catch((err: unknown) => {
        reply.body.destroy();
        reply.finish();
        throw err;
      })
      .finally(() => hangup.stop());
    await record.complete({ ...outcome, ...a2aAnswered(call) });
  };
}
