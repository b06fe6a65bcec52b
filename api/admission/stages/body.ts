// The body stage: what the call sends, as the endpoint takes it. A body that is read is held
// against the in-flight budget (api/proxy/body-budget.ts) until the answer closes, and capped at
// 32 MiB: 413, while reading (with its tokens back when the declared length alone says so).
// The streaming endpoint reads only a JSON-RPC body (MCP, A2A), which must be parsed; any other
// goes up as it comes.
import type { Readable } from 'node:stream';
import {
  MAX_TRANSACTIONAL_BODY,
  arrivedBody,
  contentLengthOf,
  declaredOver,
  readCappedBody,
} from '../../proxy/body.ts';
import { refundIfRefused } from '../refund.ts';
import type { Admitted, CallCtx } from '../door.ts';
import type { Endpoint } from '../endpoint.ts';
import type { ProxyParts } from '../../proxy/pipeline-parts.ts';
import type { AppDeps } from '../../deps.ts';

/** An MCP or A2A body on the streaming endpoint is one JSON-RPC request, read to be parsed; it is still capped. */
const MAX_JSON_RPC_BODY = 32 * 1024 * 1024;

export type ReceivedBody = {
  /** The bytes when they were read or are here already, else the request stream. */
  body: Buffer | Readable;
  /** The caller's Content-Length (streaming endpoint), re-sent when its body goes up unchanged as a stream. */
  declaredLength: number | null;
};

function readBody(
  ctx: CallCtx,
  deps: AppDeps,
  parts: Pick<ProxyParts, 'bodyBudget'>,
  admitted: Admitted,
  limit: number,
): Promise<Buffer> {
  const held = parts.bodyBudget.open(admitted.caller.tenantId);
  ctx.res.once('close', held.release);
  return refundIfRefused(
    admitted,
    413,
    () => readCappedBody(ctx.req, limit, deps.config.bodyPace, held),
    () => declaredOver(ctx.req, limit),
  );
}

export async function receiveBody(
  ctx: CallCtx,
  deps: AppDeps,
  parts: Pick<ProxyParts, 'bodyBudget'>,
  admitted: Admitted,
  endpoint: Endpoint,
): Promise<ReceivedBody> {
  if (endpoint.readsWholeBody)
    return { body: await readBody(ctx, deps, parts, admitted, MAX_TRANSACTIONAL_BODY), declaredLength: null };
  const declaredLength = contentLengthOf(ctx.get('content-length'));
  const { protocol } = admitted.agent;
  if (protocol === 'a2a' || protocol === 'mcp')
    return { body: await readBody(ctx, deps, parts, admitted, MAX_JSON_RPC_BODY), declaredLength };
  // A small body is usually here whole already: sent as the bytes it is (body.ts).
  return { body: arrivedBody(ctx.req, declaredLength) ?? ctx.req, declaredLength };
}
