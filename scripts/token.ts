// `npm run token -- --tenant T --user U [--ttl 1h] [--api URL]`: prints a bearer token valid for
// the running configuration: AUTH_JWT_SECRET, else the secret `npm start` keeps in
// DATA_DIR/secrets.json. It never makes a secret up (a token from a fresh secret would be
// refused by the API that runs with its own), and before printing it asks the running API
// whether it accepts the token: one refused means the API runs with another secret (or issuer,
// audience), and the command says so instead of printing a token that cannot work.
import { mintToken } from './lib/tokens.ts';
import { MIN_HS256_SECRET_BYTES } from '../gateway/config.ts';
import { announceDataDir, dataDir, readDevSecrets, secretsFile } from './lib/secrets.ts';
import { parseCommand, runCommand, usageExit, UsageError } from './lib/cli.ts';

const USAGE = `usage: npm run token -- --tenant T --user U [--ttl 1h] [--api URL]
  Prints a bearer token for the running configuration: AUTH_JWT_SECRET, else the secret
  \`npm start\` keeps in DATA_DIR/secrets.json (DATA_DIR default .data). Refused when the API at
  --api (default http://127.0.0.1:$PORT, PORT default 8080) answers that it does not accept it.`;
const { values } = parseCommand({
  usage: USAGE,
  options: {
    tenant: { type: 'string' },
    user: { type: 'string' },
    ttl: { type: 'string', default: '1h' },
    api: { type: 'string' },
  },
});
if (!values.tenant || !values.user) usageExit(USAGE, 'both --tenant and --user are required');
const TTL =
  /^\d+\s*(s|sec|secs|second|seconds|m|min|mins|minute|minutes|h|hr|hrs|hour|hours|d|day|days|w|week|weeks)$/i;
if (!TTL.test(values.ttl ?? '')) usageExit(USAGE, `--ttl ${values.ttl}: not a duration (e.g. 30m, 1h, 7d)`);
const apiUrl = values.api ?? `http://127.0.0.1:${process.env.PORT || 8080}`;
if (!/^https?:\/\/[^/]+/.test(apiUrl)) usageExit(USAGE, `--api ${apiUrl}: not an http(s) URL`);
const { tenant, user, ttl } = values;

/** The HS256 secret and where it came from. */
function secret(): { value: string; from: string } {
  if (process.env.AUTH_JWT_SECRET) return { value: process.env.AUTH_JWT_SECRET, from: 'AUTH_JWT_SECRET' };
  const dir = dataDir();
  announceDataDir('token', dir);
  let stored;
  try {
    stored = readDevSecrets(dir);
  } catch {
    throw new UsageError(`${secretsFile(dir)} cannot be read: is DATA_DIR the data folder of npm start?`);
  }
  if (!stored?.jwtSecret)
    throw new UsageError(
      `no secret in ${secretsFile(dir)}: run npm start first (it creates one), or set AUTH_JWT_SECRET to the API's`,
    );
  return { value: stored.jwtSecret, from: secretsFile(dir) };
}

/** Whether the API at `apiUrl` accepts the token: true, false, or undefined when none answers. */
async function apiAccepts(token: string): Promise<boolean | undefined> {
  try {
    const res = await fetch(new URL('/v1/agents?limit=1', apiUrl), {
      headers: { authorization: `Bearer ${token}` },
      signal: AbortSignal.timeout(3_000),
    });
    await res.body?.cancel();
    return res.status !== 401;
  } catch {
    return undefined;
  }
}

await runCommand('token', async () => {
  const { value, from } = secret();
  const bytes = Buffer.byteLength(value, 'utf8');
  if (bytes < MIN_HS256_SECRET_BYTES)
    throw new UsageError(
      `AUTH_JWT_SECRET is ${bytes} bytes; HS256 needs at least ${MIN_HS256_SECRET_BYTES} (the API refuses it too)`,
    );
  const token = await mintToken({
    secret: value,
    tenant,
    user,
    ttl,
    tenantClaim: process.env.AUTH_TENANT_CLAIM,
    userClaim: process.env.AUTH_USER_CLAIM,
    issuer: process.env.AUTH_ISSUER,
    audience: process.env.AUTH_AUDIENCE,
  });
  const accepted = await apiAccepts(token);
  if (accepted === false)
    throw new UsageError(
      `the API at ${apiUrl} refuses tokens signed with the secret from ${from}: it runs with another AUTH_JWT_SECRET ` +
        `(or DATA_DIR, AUTH_ISSUER, AUTH_AUDIENCE); run this command with the API's settings`,
    );
  if (accepted === undefined)
    process.stderr.write(`token: no API answers at ${apiUrl}; the token is for the secret from ${from}\n`);
  console.log(token);
});
