// The facts stage: what the later stages know about the call (api/proxy/call.ts), its id minted
// and its price computed once from them (the agent's, the MCP tool's, the A2A method's or skill's).
import type { Readable } from 'node:stream';
import { newId } from '../../../lib/ids.ts';
import { publicRequestUrl } from '../../public-url.ts';
import { withPrice, type ProxyCall } from '../../proxy/call.ts';
import type { Admitted, CallCtx } from '../door.ts';
import type { Endpoint } from '../endpoint.ts';
import type { ReceivedBody } from './body.ts';
import type { Parsed } from './parse.ts';
import type { AppDeps } from '../../deps.ts';

/**
 * The body's size as policy reads it and the record keeps it: on the transactional endpoint the
 * body received; on the streaming endpoint the body sent up, and without Content-Length a
 * streamed one counts as arbitrarily large (null; docs/API.md "Limits").
 */
function bodyBytesOf(endpoint: Endpoint, received: ReceivedBody, forwarded: Buffer | Readable): number | null {
  if (endpoint.readsWholeBody) return (received.body as Buffer).length;
  return Buffer.isBuffer(forwarded) ? forwarded.length : received.declaredLength;
}

export function callFacts(
  ctx: CallCtx,
  deps: AppDeps,
  admitted: Admitted,
  endpoint: Endpoint,
  received: ReceivedBody,
  parsed: Parsed,
  forwarded: Buffer | Readable,
): ProxyCall {
  return withPrice({
    caller: admitted.caller,
    agent: admitted.agent,
    mode: endpoint.mode,
    invocationId: admitted.invocationId ?? newId('inv'),
    requestId: admitted.requestId,
    model: admitted.model,
    contentType: ctx.get('content-type') || null,
    bodyBytes: bodyBytesOf(endpoint, received, forwarded),
    resourceUrl: publicRequestUrl(ctx, deps.config.publicAddress),
    mcp: parsed.mcp,
    a2a: parsed.a2a,
    policyWarning: null,
    payment: null,
  });
}
