// The invoke fast path (docs/PROXY.md, "The invoke fast path"): POST /v1/proxy/{id} and
// /v1/proxy/{id}/stream are served by one handler that runs ahead of the general middleware
// stack. It calls, as plain functions and in the stack's order, the same layers a proxied call
// passes there (the server span, the request id with its metrics and access line, the error
// mapping, authentication), then the same endpoint, whose admission runs every stage (agent,
// rate limit, body, policy, payment; then records, receipts, header rules, the SSRF guard). What it
// skips is only what a proxied call never needed: matching the path against every other
// router and their middleware. Anything it does not recognise (another method, a trailing
// slash, a percent-encoded id) goes down the general stack, which serves it as before.
import type { Context, Next } from 'koa';
import type { AppDeps } from '../deps.ts';
import { requireAuth, type Caller } from '../auth.ts';
import { errorMapper } from '../errors.ts';
import { traceRequests } from '../../lib/observability/spans.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import { tokenDoor } from '../admission/token-door.ts';
import type { CallCtx } from '../admission/door.ts';
import { streamRoute } from './streaming.ts';
import { transactionalRoute } from './transactional.ts';

/** The two invoke paths, exactly as served: an id of letters, digits and `_`, `/stream` or nothing. */
const INVOKE_PATH = /^\/v1\/proxy\/([A-Za-z0-9_-]+)(\/stream)?$/;

/** The route templates the general stack's router would report (metrics, access line, span). */
const CALL_ROUTE = '/v1/proxy/:id';
const STREAM_ROUTE = '/v1/proxy/:id/stream';

export type FastPathLayers = {
  /** The API's token verifier (one cache for both paths). */
  verify: (token: string) => Promise<Caller | undefined>;
  /** The API's request observer: request id, HTTP metrics, access line (lib/observability/http.ts). */
  observe: (ctx: Context, next: Next) => Promise<void>;
  /** The WWW-Authenticate value of a 401 (api/routes/oauth-metadata.ts). */
  challenge?: (ctx: Context) => string;
};

export function invokeFastPath(deps: AppDeps, services: ProxyParts, layers: FastPathLayers) {
  const door = tokenDoor(deps, services);
  const transactional = transactionalRoute(deps, services, door);
  const stream = streamRoute(deps, services, door);
  const trace = traceRequests('api');
  const mapErrors = errorMapper(deps.log);
  const authenticate = requireAuth(layers.verify, layers.challenge);
  const { observe } = layers;
  return function invokeFastPathCall(ctx: Context, next: Next): Promise<void> {
    if (ctx.method !== 'POST') return next();
    const match = INVOKE_PATH.exec(ctx.path);
    if (!match) return next();
    const call = ctx as CallCtx;
    call.params = { id: match[1] };
    const streaming = match[2] !== undefined;
    call.state.route = streaming ? STREAM_ROUTE : CALL_ROUTE;
    const route = streaming ? stream : transactional;
    return trace(ctx, () => observe(ctx, () => mapErrors(ctx, () => authenticate(ctx, () => route(call)))));
  };
}
