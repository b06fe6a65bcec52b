// Bearer-token authentication for every /v1 route: a JWT verified with jose, either HS256
// with a shared secret or RS256/ES256 against a JWKS. Any failure is 401 with no body.
import { createSecretKey, hash, type KeyObject } from 'node:crypto';
import type { Context, Next } from 'koa';
import { createRemoteJWKSet, jwtVerify, type JWTVerifyGetKey, type JWTVerifyOptions } from 'jose';
import { LRUCache } from 'lru-cache';
import type { GatewayConfig } from '../gateway/config.ts';
import { respondEmpty } from './errors.ts';

/**
 * Who a call is from: `token`, a /v1 bearer token's tenant and user claims; `x402`, the payer of
 * a public agent's call (userId `x402:<checksummed address>`, tenantId the agent's).
 */
export type Caller = { tenantId: string; userId: string; kind: 'token' | 'x402' };

export type AuthState = { caller: Caller };

// Verified tokens, remembered: a caller presents the same token on call after call, and
// verifying its signature (WebCrypto HMAC or RS/ES through jose) was the largest single CPU
// cost of a proxied call (a fifth of it, bench:proxy --profile). The same string verifies the
// same way until a time claim says otherwise, so an entry keeps `exp`/`nbf` and is checked
// against the clock on every use; it is also forgotten after a minute, so a key withdrawn
// from the JWKS stops being honoured within that minute. Bounded at 10,000 tokens (more callers
// than one replica serves at once, a few MB), least recently used out. Entries are keyed by the
// token's SHA-256, not the token: a heap snapshot or dump of the process must not hand out
// bearer tokens that are still valid.
const TOKEN_CACHE_MAX = 10_000;
const TOKEN_CACHE_TTL_MS = 60_000;

type Remembered = { caller: Caller; exp: number | undefined; nbf: number | undefined };

// Every rule a token must pass besides its signature: exp required (by default), issuer and
// audience when configured, a maximum age by `iat` when configured.
function verifyOptions(auth: GatewayConfig['auth'], algorithms: string[]): JWTVerifyOptions {
  return {
    algorithms,
    ...(auth.issuer ? { issuer: auth.issuer } : {}),
    ...(auth.audience ? { audience: auth.audience } : {}),
    ...(auth.maxTokenAgeSeconds !== undefined ? { maxTokenAge: auth.maxTokenAgeSeconds } : {}),
    ...(auth.requireExp ? { requiredClaims: ['exp'] } : {}),
  };
}

export function createVerifier(auth: GatewayConfig['auth']) {
  const remembered = new LRUCache<string, Remembered>({ max: TOKEN_CACHE_MAX, ttl: TOKEN_CACHE_TTL_MS });
  // The HS256 secret is imported once as a KeyObject: jose would otherwise import the raw
  // bytes again on every request, which every proxied call pays for.
  const key: KeyObject | JWTVerifyGetKey = auth.jwksUrl
    ? createRemoteJWKSet(new URL(auth.jwksUrl))
    : createSecretKey(Buffer.from(auth.jwtSecret ?? '', 'utf8'));
  const options = verifyOptions(auth, auth.jwksUrl ? ['RS256', 'ES256'] : ['HS256']);

  return async function verify(token: string): Promise<Caller | undefined> {
    const now = Date.now();
    const cacheKey = hash('sha256', token, 'base64');
    const known = remembered.get(cacheKey);
    if (known) {
      // jose's own rule: expired once now >= exp, not yet valid while now < nbf (no leeway).
      const seconds = Math.floor(now / 1000);
      if ((known.exp === undefined || seconds < known.exp) && (known.nbf === undefined || seconds >= known.nbf))
        return known.caller;
      remembered.delete(cacheKey);
    }
    try {
      const { payload } = await jwtVerify(token, key as KeyObject, options);
      const tenantId = payload[auth.tenantClaim];
      const userId = payload[auth.userClaim];
      if (typeof tenantId !== 'string' || tenantId === '' || typeof userId !== 'string' || userId === '')
        return undefined;
      const caller: Caller = { tenantId, userId, kind: 'token' };
      // With a maximum age, the entry also ends when the token grows too old (jose checks the
      // age with the same clock; iat is required by then).
      const tooOldAt =
        auth.maxTokenAgeSeconds !== undefined && payload.iat !== undefined
          ? (payload.iat + auth.maxTokenAgeSeconds) * 1000
          : Infinity;
      // (lru-cache reads a ttl of 0 as "forever": a token already at its age limit is not kept.)
      const ttl = Math.min(TOKEN_CACHE_TTL_MS, tooOldAt - now);
      if (ttl > 0) remembered.set(cacheKey, { caller, exp: payload.exp, nbf: payload.nbf }, { ttl });
      return caller;
    } catch {
      return undefined;
    }
  };
}

/**
 * `challenge`: the WWW-Authenticate value a 401 carries (api/routes/oauth-metadata.ts: where an
 * OAuth client such as an MCP client finds the authorization server).
 */
export function requireAuth(
  verify: (token: string) => Promise<Caller | undefined>,
  challenge?: (ctx: Context) => string,
) {
  return async function authenticate(ctx: Context, next: Next): Promise<void> {
    const header = ctx.get('authorization');
    const match = /^Bearer\s+(\S+)$/i.exec(header);
    const caller = match ? await verify(match[1]) : undefined;
    if (!caller) {
      if (challenge) ctx.set('WWW-Authenticate', challenge(ctx));
      return respondEmpty(ctx, 401);
    }
    ctx.state.caller = caller;
    await next();
  };
}
