// Bearer-token authentication for every /v1 route: a JWT verified with jose, either HS256
// with a shared secret or RS256/ES256 against a JWKS. Any failure is 401 with no body.
import { createSecretKey, type KeyObject } from 'node:crypto';
import type { Context, Next } from 'koa';
import { createRemoteJWKSet, jwtVerify, type JWTVerifyGetKey } from 'jose';
import type { GatewayConfig } from './config.ts';
import { respondEmpty } from './errors.ts';

export type Caller = { tenantId: string; userId: string };

export type AuthState = { caller: Caller };

export function createVerifier(auth: GatewayConfig['auth']) {
  // The HS256 secret is imported once as a KeyObject: jose would otherwise import the raw
  // bytes again on every request, which every proxied call pays for.
  const key: KeyObject | JWTVerifyGetKey = auth.jwksUrl
    ? createRemoteJWKSet(new URL(auth.jwksUrl))
    : createSecretKey(Buffer.from(auth.jwtSecret ?? '', 'utf8'));
  const algorithms = auth.jwksUrl ? ['RS256', 'ES256'] : ['HS256'];

  return async function verify(token: string): Promise<Caller | undefined> {
    try {
      const { payload } = await jwtVerify(token, key as KeyObject, { algorithms });
      const tenantId = payload[auth.tenantClaim];
      const userId = payload[auth.userClaim];
      if (typeof tenantId !== 'string' || tenantId === '' || typeof userId !== 'string' || userId === '') return undefined;
      return { tenantId, userId };
    } catch {
      return undefined;
    }
  };
}

export function requireAuth(verify: (token: string) => Promise<Caller | undefined>) {
  return async function authenticate(ctx: Context, next: Next): Promise<void> {
    const header = ctx.get('authorization');
    const match = /^Bearer\s+(\S+)$/i.exec(header);
    const caller = match ? await verify(match[1]) : undefined;
    if (!caller) {
      return respondEmpty(ctx, 401);
    }
    ctx.state.caller = caller;
    await next();
  };
}
