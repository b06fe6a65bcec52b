// GET /discovery/resources and GET /discovery/search: the x402 Bazaar catalog of the public
// agents (docs/API.md "Selling an agent to any x402 client", "Finding agents"), readable by
// @x402/extensions' unmodified client (`withBazaar(new HTTPFacilitatorClient({ url: <base> }))`).
// Anonymous: limited per client address and in total before anything is read, answered from the
// in-memory catalog (api/discovery/catalog.ts), a page of at most 100 entries.
import Router from '@koa/router';
import type { Context } from 'koa';
import { takeTokens } from '../admission/stages/rate-limit.ts';
import { bucket } from '../admission/public-door.ts';
import { clientAddress, publicBaseUrl } from '../public-url.ts';
import { parseQuery } from '../validation.ts';
import { createCatalog, type CatalogEntry } from '../discovery/catalog.ts';
import { createToolSchemas } from '../discovery/tool-schemas.ts';
import { clampDiscoveryLimit, DiscoveryListQuery, DiscoverySearchQuery } from '../discovery/schema.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import type { AppDeps } from '../deps.ts';

export function discoveryRoutes(
  deps: AppDeps,
  services: Pick<ProxyParts, 'limiter' | 'upstream' | 'credentials' | 'payment'>,
): Router {
  const router = new Router({ prefix: '/discovery' });
  const limits = deps.config.discovery;
  const toolSchemas = createToolSchemas(services.upstream, services.credentials);
  const payment = { deps, gate: services.payment };
  const catalog = createCatalog(deps.orm, deps.feed, payment, limits.maxAgents, toolSchemas);

  router.use(async (ctx, next) => {
    await takeTokens(services.limiter, [
      bucket(`discovery-client:${clientAddress(ctx, deps.config.publicAddress)}`, limits.rpsPerClient),
      bucket('discovery', limits.rps),
    ]);
    // An agent leaves the catalog as soon as it is closed: no cache may keep an older page.
    ctx.set('Cache-Control', 'no-cache');
    await next();
  });

  const page = (ctx: Context, entries: CatalogEntry[]) => {
    const base = publicBaseUrl(ctx, deps.config.publicAddress);
    return entries.map((entry) => ({ resource: `${base}${entry.path}`, ...entry.resource }));
  };

  router.get('/resources', async (ctx) => {
    const { limit, offset = 0, ...filter } = parseQuery(DiscoveryListQuery, ctx.query);
    const size = clampDiscoveryLimit(limit);
    const found = await catalog.find(filter);
    ctx.body = {
      x402Version: 2,
      items: page(ctx, found.slice(offset, offset + size)),
      pagination: { limit: size, offset, total: found.length },
    };
  });

  router.get('/search', async (ctx) => {
    const { limit, cursor, ...filter } = parseQuery(DiscoverySearchQuery, ctx.query);
    const size = clampDiscoveryLimit(limit);
    const offset = cursor === undefined ? 0 : Number(cursor);
    const found = await catalog.find(filter);
    const next = offset + size < found.length ? String(offset + size) : null;
    ctx.body = {
      x402Version: 2,
      resources: page(ctx, found.slice(offset, offset + size)),
      partialResults: false,
      pagination: { limit: size, cursor: next },
    };
  });

  return router;
}
