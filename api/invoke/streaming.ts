// POST /v1/proxy/{id}/stream (and a public agent's /stream): admitted like the transactional
// endpoint (api/admission/admit.ts), then one undici request with the caller's body piped up and
// the upstream's answer piped down as bytes arrive (backpressure both ways, so memory does not
// grow with body size). The call is recorded beside it (stream-record.ts) and its answer written
// by stream-relay.ts. X-Gateway-Invocation-ID, X-Request-ID, the policy warning and a payment's
// receipt are set before any upstream byte is written.
import type { Readable } from 'node:stream';
import { ApiError } from '../errors.ts';
import { forwardedHeadersOf } from '../proxy/a2a-x402.ts';
import { coarseMessage } from '../proxy/upstream-failure.ts';
import type { UpstreamResponse } from '../../gateway/upstream/client.ts';
import type { CallCtx, Door } from '../admission/door.ts';
import type { ProxyCall } from '../proxy/call.ts';
import { PAYMENT_RESPONSE_HEADER } from '../payment/x402-headers.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import type { AppDeps } from '../deps.ts';
import { admit } from '../admission/admit.ts';
import { STREAMING } from '../admission/endpoint.ts';
import { bindPayment, failedBeforeUpstream, streamRecord, type StreamRecord } from './stream-record.ts';
import { stillSettling, withPaymentRequired } from '../payment/stage.ts';
import { answerUnreached, endWithTrailer, relay, watchHangup } from './stream-relay.ts';
import { a2aAnswerTap, a2aAnswered } from '../proxy/a2a.ts';
import {
  meteredCall,
  meteredRequestUnderOwnId,
  meterOf,
  persistPartialCharge,
  streamEndsBy,
  type MeteredCall,
} from '../../gateway/invocations/metered.ts';
import { paymentResponseValue } from '../../gateway/payment/dialect.ts';
import { queryRows } from '../../gateway/db/orm.ts';
import type { ChargeMeter } from '../../gateway/metering/meter.ts';

const NOT_FORWARDED = { kind: 'not_forwarded' } as const;

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
  ctx: CallCtx,
  call: ProxyCall,
  credentialHeaders: Record<string, string>,
  body: Buffer | Readable,
  declaredLength: number | null,
  meter: ChargeMeter | null,
  metered: MeteredCall | null,
): Record<string, string> {
  const headers: Record<string, string> = {
    ...forwardedHeadersOf(ctx, call),
    ...credentialHeaders,
    'x-request-id': call.requestId,
  };
  // An A2A answer is watched for the tasks it names, which are bound as it passes (a2a.ts):
  // the gateway cannot read a compressed one, so it asks for it uncompressed.
  // So is a tokens-metered answer, whose usage the meter reads (gateway/metering/reader.ts), and
  // a metered MCP call's, whose answer says whether the request failed (gateway/mcp/answer-watch.ts).
  if (call.a2a || meter?.kind === 'tokens' || (metered && call.mcp?.rpcId !== undefined))
    headers['accept-encoding'] = 'identity';
  // The caller's body goes up unchanged, so its declared length still holds.
  if (!Buffer.isBuffer(body) && declaredLength !== null) headers['content-length'] = String(declaredLength);
  return headers;
}

/** POST of a streaming call, at either door (api/admission/door.ts). */
export function streamRoute(deps: AppDeps, services: ProxyParts, door: Door) {
  return async function stream(ctx: CallCtx): Promise<void> {
    const {
      call,
      body: received,
      declaredLength,
      credentialHeaders,
      budget,
    } = await admit(ctx, deps, services, door, STREAMING);
    const gatewayHeaders = gatewayHeadersOf(call);
    ctx.set(gatewayHeaders);
    const record = streamRecord(deps, services, call);
    try {
      // A metered call's meter reads the answer as it is piped (stream-relay.ts).
      const meter = meterOf(call.agent.pricing);
      const maximum = record.row.paymentMaxAmount ?? null;
      // An MCP request charged after its answer goes up under a JSON-RPC id of the gateway's own,
      // its answer watched and brought down under that id (gateway/jsonrpc/own-id.ts).
      const own = meteredRequestUnderOwnId(
        meter,
        maximum,
        call.mcp && Buffer.isBuffer(received) ? received : null,
        call.mcp?.idSpan,
      );
      if (own) call.mcp!.ownId = { id: own.id, callerIdText: own.callerIdText };
      const metered = meteredCall(
        meter,
        maximum,
        'streaming',
        (measured) => persistPartialCharge(queryRows(deps.orm), call.invocationId, measured),
        own ? own.id : call.mcp?.rpcId,
      );

      // STREAMING.credential is `resolve`: null when a free call's could not be.
      if (!credentialHeaders) {
        await record.complete({ ...failedBeforeUpstream('credential'), ...metered?.complete(NOT_FORWARDED) });
        throw new ApiError(502, coarseMessage('credential'));
      }
      // A voucher on a channel this process holds: its row and binding are written as it is
      // forwarded, the answer waiting for them, and its signature is checked while that write
      // is in flight (its other terms were, at admission): the call goes no further without it.
      const writing = call.payment?.channel?.turn ? record.writeAsForwarded() : null;
      writing?.catch(() => undefined);
      if (writing) {
        if (!(await record.signatureHolds())) {
          await budget?.release();
          throw withPaymentRequired(deps, call, new ApiError(402, 'invalid payment'));
        }
        if (record.writeFailed()) {
          // Not written, so not forwarded: nothing charged; the payer sends the same payment again.
          record.release();
          await budget?.release();
          throw stillSettling();
        }
      } else if (call.payment) {
        // Not bound (used by a concurrent call, or not recorded): this call is never served.
        await bindPayment(deps, services, call, record.row).catch(async (err: unknown) => {
          await budget?.release();
          throw err;
        });
      } else record.start();
      if (call.payment?.responseHeader) {
        const name = PAYMENT_RESPONSE_HEADER[call.payment.dialect].toLowerCase();
        gatewayHeaders[name] = call.payment.responseHeader;
        ctx.set(name, call.payment.responseHeader);
      }

      // Digested as the caller sent it; sent up under the gateway's id, if it has one.
      const hashed = record.hashRequest(received);
      const body = own ? own.body : hashed;
      const hangup = watchHangup(ctx.res, chargeDeadlineMs(call));
      let reply: UpstreamResponse;
      const opening = services.upstream.open({
        url: call.agent.upstreamUrl!,
        headers: upstreamHeaders(ctx, call, credentialHeaders, body, declaredLength, meter, metered),
        body,
        deadlineMs: deps.config.upstream.timeoutMs,
        deadlineCoversBody: false,
        idleTimeoutMs: deps.config.upstream.timeoutMs,
        signal: hangup.signal,
        resendAllowed: call.agent.retryNonIdempotent,
        tenantId: call.caller.tenantId,
      });
      try {
        reply = await opening;
      } catch (err) {
        hangup.stop();
        return answerUnreached(ctx, record, err, metered);
      }
      if (writing) {
        try {
          await writing;
        } catch {
          // Not written: the answer is not given, nothing is charged; the payer sends the same payment again.
          hangup.stop();
          // Dropped unread: its abort is expected, not an error of this process.
          reply.body.on('error', () => undefined);
          reply.body.destroy();
          reply.finish();
          record.release();
          // The upstream was asked, though: the call is on record, unpaid.
          record.recordUnanswered();
          await budget?.release();
          throw stillSettling();
        }
      }
      // The answer holds its tenant's connection slot until its body closes: one that cannot be relayed is closed here.
      const tap = a2aAnswerTap(call, reply.headers, services.a2aTasks, deps.log);
      const trailer = paymentTrailerOf(ctx, call, metered);
      try {
        const outcome = await relay(ctx, call, reply, gatewayHeaders, record, tap, metered, trailer)
          .catch((err: unknown) => {
            reply.body.destroy();
            reply.finish();
            throw err;
          })
          .finally(() => hangup.stop());
        await record.complete({ ...outcome, ...a2aAnswered(call) });
        if (trailer) await endWithPaymentTrailer(deps, ctx, call, record, trailer);
      } finally {
        // A response kept open for its trailer is never left open.
        if (trailer) endWithTrailer(ctx.res, null);
      }
    } finally {
      // A held channel's turn never outlives its call, whatever ended it (stream-record.ts).
      record.release();
    }
  };
}

/**
 * How long a metered call's answer may stream (ms from now): until its payer's authorization,
 * less the settle's time, so its charge can still be collected; null for any other call.
 */
function chargeDeadlineMs(call: ProxyCall): number | null {
  const endsBy = streamEndsBy(call.payment?.chargeBy);
  return endsBy === null ? null : Math.max(0, endsBy.getTime() - Date.now());
}

/** Whether the caller accepts trailers (`TE: trailers`, RFC 9110 §10.1.4). */
function acceptsTrailers(ctx: CallCtx): boolean {
  return ctx
    .get('te')
    .split(',')
    .some((part) => part.split(';')[0].trim().toLowerCase() === 'trailers');
}

/**
 * The payment-response trailer's name when this call's charge is settled after its answer and
 * its caller accepts trailers: the answer then ends with the settlement's receipt. Null otherwise.
 */
function paymentTrailerOf(ctx: CallCtx, call: ProxyCall, metered: MeteredCall | null): string | null {
  if (!metered || !call.payment || call.payment.dialect === 'mcp' || !acceptsTrailers(ctx)) return null;
  return PAYMENT_RESPONSE_HEADER[call.payment.dialect];
}

/**
 * Ends a metered answer with its payment-response trailer once its charge is settled (within
 * the settlement deadline; past it, or when nothing settled, without one: the invocation record
 * and the receipt always carry the settlement).
 */
async function endWithPaymentTrailer(
  deps: AppDeps,
  ctx: CallCtx,
  call: ProxyCall,
  record: StreamRecord,
  trailer: string,
): Promise<void> {
  // Nobody is left to read a trailer: nothing is waited for.
  if (ctx.res.destroyed) return;
  const settled = await record.settledCharge(deps.config.payment.settlementTimeoutMs);
  const payment = call.payment!;
  const value =
    settled?.state === 'settled'
      ? paymentResponseValue(deps.config.payment, payment.dialect, {
          transaction: settled.transaction ?? '',
          network: payment.network,
          payer: settled.payer ?? payment.payer,
        })
      : null;
  endWithTrailer(ctx.res, value ? { [trailer]: value } : null);
}
