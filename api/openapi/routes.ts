// GET /v1/openapi.json and GET /docs (the rendered reference). Both public: they describe the
// API and hold no tenant data. Built once per process, for its settings (the agents' rate
// ceiling bounds what a create or update may set).
import Router from '@koa/router';
import type { RateCeiling } from '../agents/schema.ts';
import { buildOpenApiDocument } from './document.ts';
import { renderReferencePage } from './page.ts';

export function openapiRoutes(ceiling: RateCeiling): Router {
  const router = new Router();
  let document: Record<string, unknown> | undefined;
  const openApiDocument = () => (document ??= buildOpenApiDocument(ceiling));
  let page: string | undefined;
  router.get('/v1/openapi.json', (ctx) => {
    ctx.set('Cache-Control', 'no-cache');
    ctx.body = openApiDocument();
  });
  router.get('/docs', (ctx) => {
    page ??= renderReferencePage(openApiDocument());
    ctx.type = 'text/html; charset=utf-8';
    ctx.set('Content-Security-Policy', "default-src 'none'; style-src 'unsafe-inline'");
    ctx.body = page;
  });
  return router;
}
