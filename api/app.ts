// Builds the gateway's Koa application from its dependencies; api/main.ts runs it.
import Koa from 'koa';
import Router from '@koa/router';
import { bodyParser } from '@koa/bodyparser';
import type { AppDeps } from './deps.ts';
import { createVerifier, requireAuth, type AuthState } from './auth.ts';
import { badRequest, errorMapper } from './errors.ts';
import { answerUnservedMethods } from './allowed-methods.ts';
import { compressOwnAnswers } from './compression.ts';
import { MAX_BODY_DEPTH, nestsDeeperThan } from '../lib/json-depth.ts';
import { observeRequests } from '../lib/observability/http.ts';
import { countRateLimitRejection } from './metrics.ts';
import { traceRequests } from '../lib/observability/spans.ts';
import { policyRoutes } from './routes/policy.ts';
import { analyticsRoutes } from './routes/analytics.ts';
import { jwksRoutes, receiptRoutes } from './routes/receipts.ts';
import { healthRoutes } from './routes/health.ts';
import { agentRoutes } from './routes/agents.ts';
import { fetchAgentCard } from '../gateway/a2a/card.ts';
import { proxyRoutes } from './routes/proxy.ts';
import { createProxyParts, type ProxyParts } from './proxy/pipeline-parts.ts';
import { syncGateCaches } from './admission/freshness-barrier.ts';
import { invokeFastPath } from './invoke/fast-path.ts';
import { createAccessRecorder } from '../lib/observability/access.ts';
import { invocationRoutes } from './routes/invocations.ts';
import { credentialRoutes } from './routes/credentials.ts';
import { mcpServerRoutes } from './routes/mcp-servers.ts';
import { budgetRoutes } from './routes/budgets.ts';
import { settlementRoutes } from './routes/settlement.ts';
import { channelRoutes } from './routes/channels.ts';
import { openapiRoutes } from './openapi/routes.ts';
import { consoleRoutes } from './console/routes.ts';
import { publicRoutes } from './routes/public.ts';
import { discoveryRoutes } from './routes/discovery.ts';
import { bearerChallenge, oauthMetadataRoutes } from './routes/oauth-metadata.ts';

/** `services`: the long-lived services the caller wired itself (api/wiring.ts: the start backlog its relay shares). */
export function createApp(deps: AppDeps, wired: Partial<ProxyParts> = {}): Koa {
  const app = new Koa();
  // The long-lived services, wired once: the proxy routes, the policy routes and /readyz share them.
  const services = createProxyParts(deps, wired);
  app.proxy = false;
  // A caller that leaves before a streamed answer ends (a browser leaving a console view, which
  // aborts its fetches) cuts the answer's stream short: Koa reports that as an error on stderr.
  // Not an error of the gateway's; every other one is reported as Koa does.
  app.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'ERR_STREAM_PREMATURE_CLOSE') app.onerror(err);
  });
  // Before anything else: a proxied call's cache barrier travels while the rest of the gate runs.
  app.use(syncGateCaches(deps));
  // One token cache and one access recorder for both paths below.
  const verify = createVerifier(deps.config.auth);
  const observe = observeRequests(
    'api',
    deps.log,
    countRateLimitRejection,
    createAccessRecorder('api', deps.log, deps.config.accessLog),
  );
  // The invoke endpoints, ahead of the general stack: the same layers and gate as plain calls.
  const challenge = bearerChallenge(deps);
  app.use(invokeFastPath(deps, services, { verify, observe, challenge }));
  // Outermost: the request id, access log and HTTP metrics see every answer, errors included.
  app.use(traceRequests('api'));
  app.use(observe);
  // The management and analytics answers (mapped errors included) compressed when accepted; proxied ones never.
  app.use(compressOwnAnswers());
  app.use(errorMapper(deps.log));
  // 405 with Allow for a served path asked with another method, on every router below.
  app.use(answerUnservedMethods());

  const health = healthRoutes(deps, services.startBacklog);
  app.use(health.routes());
  // The API description and its reference page are public: they describe, they hold no tenant data.
  const { agentMaxRps: rps, agentMaxBurst: burst } = deps.config.rateLimit;
  app.use(openapiRoutes({ rps, burst }).routes());
  app.use(jwksRoutes(deps).routes());
  // The web console's page and assets: public too; the page reads /v1 with the token its user pastes.
  app.use(consoleRoutes(deps).routes());
  // Where an OAuth (MCP) client learns how to get a token: public, like the API description.
  app.use(oauthMetadataRoutes(deps));
  // Public agents: no token, paid per call with x402 (api/routes/public.ts); the raw body is the proxy's.
  app.use(publicRoutes(deps, services).routes());
  // Their catalog, in the x402 Bazaar's format (api/routes/discovery.ts): anonymous too.
  app.use(discoveryRoutes(deps, services).routes());

  const v1 = new Router<AuthState>({ prefix: '/v1' });
  v1.use(requireAuth(verify, challenge));
  // JSON bodies for the management API only; the proxy reads its raw body itself.
  const json = bodyParser({ enableTypes: ['json'], jsonLimit: '1mb', encoding: 'utf-8' });
  v1.use(async (ctx, next) => (ctx.path.startsWith('/v1/proxy/') ? next() : json(ctx, next)));
  v1.use(async (ctx, next) => {
    if (nestsDeeperThan(ctx.request.body, MAX_BODY_DEPTH))
      throw badRequest(`JSON body nests deeper than ${MAX_BODY_DEPTH} levels`);
    await next();
  });
  for (const routes of [
    agentRoutes(deps, services.agents, (url) => fetchAgentCard(services.upstream.dispatcher, url)),
    credentialRoutes(deps),
    mcpServerRoutes(deps, services),
    budgetRoutes(deps, services),
    settlementRoutes(deps),
    channelRoutes(deps),
    proxyRoutes(deps, services),
    policyRoutes(deps, services.policy),
    analyticsRoutes(deps),
    receiptRoutes(deps),
    invocationRoutes(deps),
  ])
    v1.use(routes.routes());
  app.use(v1.routes());
  return app;
}
