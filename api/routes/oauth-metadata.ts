// OAuth 2.0 Protected Resource Metadata (RFC 9728) for clients that discover how to get a token,
// as MCP clients do: `GET /.well-known/oauth-protected-resource` (and the same document under
// any path suffix, where RFC 9728 puts a resource's own) names the resource (the gateway's
// `/v1`), the authorization server that issues its tokens (AUTH_ISSUER; a deployment verifying
// tokens against AUTH_JWKS_URL sets the issuer of those keys) and the scopes (AUTH_SCOPES). Every
// /v1 401, the MCP endpoints' included, points at it in `WWW-Authenticate` (api/auth.ts).
import type { Context, Middleware } from 'koa';
import { publicBaseUrl } from '../public-url.ts';
import type { AppDeps } from '../deps.ts';

const WELL_KNOWN = '/.well-known/oauth-protected-resource';

/** The WWW-Authenticate value of a /v1 401: the bearer scheme and where its metadata is. */
export function bearerChallenge(deps: AppDeps) {
  return (ctx: Context) => `Bearer resource_metadata="${publicBaseUrl(ctx, deps.config.publicAddress)}${WELL_KNOWN}"`;
}

export function oauthMetadataRoutes(deps: AppDeps): Middleware {
  const { issuer, scopes } = deps.config.auth;
  const document = (ctx: Context) => ({
    resource: `${publicBaseUrl(ctx, deps.config.publicAddress)}/v1`,
    authorization_servers: issuer ? [issuer] : [],
    scopes_supported: scopes,
    bearer_methods_supported: ['header'],
    resource_name: 'Agent gateway',
  });
  return async function protectedResourceMetadata(ctx, next) {
    if (ctx.method !== 'GET' || (ctx.path !== WELL_KNOWN && !ctx.path.startsWith(`${WELL_KNOWN}/`))) return next();
    ctx.set('Cache-Control', 'max-age=300');
    ctx.body = document(ctx);
  };
}
