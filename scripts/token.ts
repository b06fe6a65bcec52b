// `npm run token -- --tenant T --user U [--ttl 1h]`: prints a bearer token valid for the
// running configuration (AUTH_JWT_SECRET, or the secret `npm start` keeps in DATA_DIR).
import { resolve } from 'node:path';
import { mintToken } from '../gateway/tokens.ts';
import { MIN_HS256_SECRET_BYTES } from '../gateway/config.ts';
import { loadDevSecrets } from './lib/secrets.ts';
import { parseCommand, runCommand, usageExit, UsageError } from './lib/cli.ts';

const USAGE = `usage: npm run token -- --tenant T --user U [--ttl 1h]
  Prints a bearer token for the running configuration: AUTH_JWT_SECRET, else the secret
  \`npm start\` keeps in DATA_DIR/secrets.json (DATA_DIR default .data).`;
const { values } = parseCommand({
  usage: USAGE,
  options: { tenant: { type: 'string' }, user: { type: 'string' }, ttl: { type: 'string', default: '1h' } },
});
if (!values.tenant || !values.user) usageExit(USAGE, 'both --tenant and --user are required');
const { tenant, user, ttl } = values;
await runCommand('token', async () => {
  const secret = process.env.AUTH_JWT_SECRET ?? loadDevSecrets(resolve(process.env.DATA_DIR ?? '.data')).jwtSecret;
  const bytes = Buffer.byteLength(secret, 'utf8');
  if (bytes < MIN_HS256_SECRET_BYTES)
    throw new UsageError(
      `AUTH_JWT_SECRET is ${bytes} bytes; HS256 needs at least ${MIN_HS256_SECRET_BYTES} (the API refuses it too)`,
    );
  if (
    !/^\d+\s*(s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hr|hrs|hour|hours|d|day|days|w|week|weeks)$/i.test(
      ttl ?? '',
    )
  ) {
    throw new UsageError(`--ttl ${ttl}: not a duration (e.g. 30m, 1h, 7d)`);
  }
  console.log(
    await mintToken({
      secret,
      tenant,
      user,
      ttl,
      tenantClaim: process.env.AUTH_TENANT_CLAIM,
      userClaim: process.env.AUTH_USER_CLAIM,
      issuer: process.env.AUTH_ISSUER,
      audience: process.env.AUTH_AUDIENCE,
    }),
  );
});
