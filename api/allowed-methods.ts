// The answer for a path the API serves asked with a method it does not serve there: 405 with an
// `Allow` header naming the path's methods and the `{error}` body every 4xx with a body has;
// OPTIONS is answered 204 with the same header. A path no route serves stays a 404, whatever
// the method. One middleware for every router of the app: @koa/router records each router's
// layers whose path matched (`ctx.matched`, accumulated across routers), while a router's own
// allowedMethods() sees only its methods list and answers 501 for any method outside it (TRACE).
// Only a route matching path and method runs the `/v1` router's middleware, authentication
// included, so this answer comes before authentication, as a 404 does: which methods a path
// takes is public (GET /v1/openapi.json) and tells nothing about any tenant.
import type { Context, Next } from 'koa';
import { ApiError } from './errors.ts';

type MatchedLayer = { methods: string[] };

export function answerUnservedMethods() {
  return async function unservedMethods(ctx: Context, next: Next): Promise<void> {
    await next();
    // Anything a route answered (its own 404 included) has a body; an unanswered request has none.
    if (ctx.status !== 404 || ctx.body != null) return;
    const matched = (ctx as Context & { matched?: MatchedLayer[] }).matched ?? [];
    const allowed = [...new Set(matched.flatMap((layer) => layer.methods))];
    if (allowed.length === 0 || allowed.includes(ctx.method)) return;
    const allow = allowed.join(', ');
    if (ctx.method === 'OPTIONS') {
      ctx.set('Allow', allow);
      ctx.status = 204;
      return;
    }
    throw new ApiError(405, 'method not allowed', { Allow: allow });
  };
}
