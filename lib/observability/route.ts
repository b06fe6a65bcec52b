// The route label of a request, shared by the metrics, the access log and the spans: the
// template of the route that matched its path and method (`/v1/agents/:id`), or `unmatched`.
// @koa/router sets `ctx._matchedRoute` to the path of every layer it runs, middleware
// included, so a request that stops in one (a 401 from the `/v1` router's auth) would carry
// that layer's raw regular expression (`/v1(?:\/|$)`). The matched layers themselves say
// which ones are routes: only a layer with methods is, and only its path is a template.
import type { Context } from 'koa';

type MatchedLayer = { path: string | RegExp; methods: string[] };

export const UNMATCHED = 'unmatched';

/** The template of the last route whose path and method match the request, else `unmatched`. */
export function routeTemplate(ctx: Context): string {
  const own = (ctx.state as { route?: unknown } | undefined)?.route;
  if (typeof own === 'string') return own;
  const layers = (ctx as Context & { matched?: MatchedLayer[] }).matched ?? [];
  for (let i = layers.length - 1; i >= 0; i--) {
    const { path, methods } = layers[i];
    if (typeof path === 'string' && methods.includes(ctx.method)) return path;
  }
  return UNMATCHED;
}
