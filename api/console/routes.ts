// GET /console: the web console (console/, bundled by `npm run build` into CONSOLE_DIR), and
// GET /console/assets/{file}: its content-hashed script and stylesheet. Public, like /docs:
// the page holds no tenant data; it reads /v1 from the browser with the token the user pastes.
// The page carries a strict Content-Security-Policy (this origin only, no inline script or
// style), is revalidated on every load (it names the current assets), and the assets, whose
// names change with their content, are cached for a year.
import { readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import Router from '@koa/router';
import type { Context } from 'koa';
import { ApiError, notFound } from '../errors.ts';
import type { AppDeps } from '../deps.ts';

/**
 * This origin only; with a "sign in with" provider, its origin too for the page's two requests to
 * it (its discovery document and the code's exchange at its token endpoint, which the provider
 * serves with CORS).
 */
function consoleCsp(provider?: string): string {
  return [
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    `connect-src 'self'${provider ? ` ${provider}` : ''}`,
    "img-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
};

type Built = { page: string; assets: Map<string, Buffer> };

/** The build's files, read once (a few hundred KiB); none until the folder holds a build. */
function readBuild(dir: string): Built | undefined {
  try {
    const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as { files: string[] };
    const assets = new Map<string, Buffer>();
    for (const file of manifest.files.filter((f) => f.startsWith('assets/')))
      assets.set(file.slice('assets/'.length), readFileSync(join(dir, file)));
    return { page: readFileSync(join(dir, 'index.html'), 'utf8'), assets };
  } catch {
    return undefined;
  }
}

const escapeAttribute = (text: string) =>
  text.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function securityHeaders(ctx: Context): void {
  ctx.set('X-Content-Type-Options', 'nosniff');
  ctx.set('Referrer-Policy', 'no-referrer');
}

export function consoleRoutes(deps: Pick<AppDeps, 'config'>): Router {
  const router = new Router();
  const { dir, temporalUiUrl, oidcClientId } = deps.config.console;
  // Sign-in with the OpenID provider that issues the tenants' tokens (config checks it is a URL).
  const oidc =
    oidcClientId && deps.config.auth.issuer
      ? {
          issuer: deps.config.auth.issuer,
          clientId: oidcClientId,
          scope: ['openid', ...deps.config.auth.scopes].join(' '),
        }
      : undefined;
  const csp = consoleCsp(oidc && new URL(oidc.issuer).origin);
  let built: Built | undefined;
  const build = () => (built ??= readBuild(dir));
  const unbuilt = () => new ApiError(503, 'the console is not built: run npm run build (CONSOLE_DIR)');

  router.get('/console', (ctx) => {
    const { page } = build() ?? {};
    if (!page) throw unbuilt();
    // Served at /console or /console/: the assets and the API named relative to either.
    const nested = ctx.path.endsWith('/');
    const config = JSON.stringify({
      apiBase: nested ? '../' : './',
      temporalUi: temporalUiUrl,
      namespace: deps.config.temporal.namespace,
      ...(oidc ? { oidc } : {}),
    });
    securityHeaders(ctx);
    ctx.set('Content-Security-Policy', csp);
    ctx.set('Cache-Control', 'no-cache');
    ctx.type = 'text/html; charset=utf-8';
    ctx.body = page
      .replace('%CONFIG%', escapeAttribute(config))
      .replaceAll('%ASSETS%', nested ? 'assets' : 'console/assets');
  });

  router.get('/console/assets/:file', (ctx) => {
    const assets = build()?.assets;
    if (!assets) throw unbuilt();
    const content = assets.get(ctx.params.file);
    if (!content) throw notFound('no such console asset');
    securityHeaders(ctx);
    ctx.set('Cache-Control', 'public, max-age=31536000, immutable');
    ctx.type = TYPES[extname(ctx.params.file)] ?? 'application/octet-stream';
    ctx.body = content;
  });

  return router;
}
