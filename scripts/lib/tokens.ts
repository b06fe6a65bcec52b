// Issues HS256 bearer tokens for the running configuration (development and tests; production
// deployments point AUTH_JWKS_URL at their identity provider instead).
import { SignJWT } from 'jose';

export async function mintToken(opts: {
  secret: string;
  tenant: string;
  user: string;
  ttl?: string;
  tenantClaim?: string;
  userClaim?: string;
  /** AUTH_ISSUER / AUTH_AUDIENCE of the running configuration, when set. */
  issuer?: string;
  audience?: string;
}): Promise<string> {
  let jwt = new SignJWT({
    [opts.tenantClaim ?? 'tenant_id']: opts.tenant,
    ...(opts.userClaim && opts.userClaim !== 'sub' ? { [opts.userClaim]: opts.user } : {}),
  })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(opts.user)
    .setIssuedAt()
    .setExpirationTime(opts.ttl ?? '1h');
  if (opts.issuer) jwt = jwt.setIssuer(opts.issuer);
  if (opts.audience) jwt = jwt.setAudience(opts.audience);
  return jwt.sign(new TextEncoder().encode(opts.secret));
}
