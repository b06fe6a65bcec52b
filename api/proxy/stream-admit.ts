// A streaming call through the gate: admitted at its door, its body taken as it comes (read and
// parsed only for an MCP agent), its facts gathered, then policy and payment, with the agent's
// credential resolved once, between them.
import type { Readable } from 'node:stream';
import { newId } from '../../lib/ids.ts';
import { ApiError } from '../errors.ts';
import { publicRequestUrl } from '../public-url.ts';
import { coarseMessage } from './upstream-failure.ts';
import { cheapToParse, refundIfRefused, runStages, type Admitted, type Door, type GateCtx } from './gate.ts';
import { parseMcpBody } from './mcp.ts';
import { parseA2aRequest } from './a2a-x402.ts';
import { arrivedBody, contentLengthOf, declaredOver, readCappedBody } from './body.ts';
import { withPrice, type ProxyCall } from './call.ts';
import { isCharged } from '../../gateway/payment/pricing.ts';
import type { ProxyServices } from './services.ts';
import type { AppDeps } from '../deps.ts';

/** An MCP body is one JSON-RPC request and must be read to be parsed; it is still capped. */
const MAX_MCP_BODY = 32 * 1024 * 1024;

export type AdmittedStream = {
  call: ProxyCall;
  /** The caller's body: the bytes when they are here (or were read to be parsed), else the request stream. */
  body: Buffer | Readable;
  /** The caller's Content-Length, re-sent when its body goes up unchanged as a stream. */
  declaredLength: number | null;
  /** The agent's credential headers; null when a free call's could not be resolved (recorded as `credential`). */
  credentialHeaders: Record<string, string> | null;
};

/** A JSON-RPC body (MCP, A2A) is read to be parsed, within the same cap. */
function readJsonRpcBody(ctx: GateCtx, deps: AppDeps, services: ProxyServices, admitted: Admitted): Promise<Buffer> {
  const held = services.bodyBudget.open(admitted.caller.tenantId);
  ctx.res.once('close', held.release);
  return refundIfRefused(
    admitted,
    413,
    () => readCappedBody(ctx.req, MAX_MCP_BODY, deps.config.bodyPace, held),
    () => declaredOver(ctx.req, MAX_MCP_BODY),
  );
}

/** The call as the gate sees it: admitted, its body (read when MCP or A2A must parse it) and its facts. */
async function admitCall(ctx: GateCtx, deps: AppDeps, services: ProxyServices, door: Door) {
  const admitted = await door.admit(ctx);
  const { agent, requestId, model } = admitted;
  const declaredLength = contentLengthOf(ctx.get('content-length'));
  let body: Buffer | Readable;
  let mcp: ProxyCall['mcp'] = null;
  let a2a: ProxyCall['a2a'] = null;
  if (agent.protocol === 'a2a') {
    const read = await readJsonRpcBody(ctx, deps, services, admitted);
    const parsed = await refundIfRefused(
      admitted,
      400,
      () => parseA2aRequest(ctx, read, agent, 'streaming', door.speaksA2aPayments ? services.a2aPaymentTasks : null),
      () => cheapToParse(read),
    );
    a2a = parsed.a2a;
    // Without payment keys, or the kept message a paying one pays for (a2a-x402.ts).
    body = parsed.forwardBody ?? read;
  } else if (agent.protocol === 'mcp') {
    const read = await readJsonRpcBody(ctx, deps, services, admitted);
    mcp = await refundIfRefused(
      admitted,
      400,
      () => parseMcpBody(read),
      () => cheapToParse(read),
    );
    // A payment in `_meta` is never forwarded: the body goes up without it (gateway/mcp/x402.ts).
    body = mcp.forwardBody ?? read;
  } else {
    // A small body is usually here whole already: sent as the bytes it is (body.ts).
    body = arrivedBody(ctx.req, declaredLength) ?? ctx.req;
  }
  const call: ProxyCall = withPrice({
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
  });
  return { call, admitted, body, declaredLength };
}

/**
 * The agent's credential, resolved once per call, after policy and before the payment: one
 * that cannot be resolved refuses a priced call before the payer is charged (502); a free
 * call's failure is recorded by the route (null).
 */
async function credentialOf(services: ProxyServices, call: ProxyCall): Promise<Record<string, string> | null> {
  try {
    return await services.credentials.headersFor(call.caller.tenantId, call.agent.credentialRef);
  } catch {
    if (isCharged(call.price)) throw new ApiError(502, coarseMessage('credential'));
    return null;
  }
}

/** Admission, body, policy, credential and payment: what the call is, once the gate let it through. */
export async function admitStream(
  ctx: GateCtx,
  deps: AppDeps,
  services: ProxyServices,
  door: Door,
): Promise<AdmittedStream> {
  const { call, admitted, body, declaredLength } = await admitCall(ctx, deps, services, door);
  let credentialHeaders: Record<string, string> | null = null;
  await runStages(ctx, deps, services, call, admitted, async () => {
    credentialHeaders = await credentialOf(services, call);
  });
  return { call, body, declaredLength, credentialHeaders };
}
