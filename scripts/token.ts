// `npm run token -- --tenant T --user U [--ttl 1h]`: prints a bearer token valid for the
// running configuration (AUTH_JWT_SECRET, or the secret `npm start` keeps in DATA_DIR).
import { parseArgs } from 'node:util';
import { resolve } from 'node:path';
import { mintToken } from '../api/tokens.ts';
import { loadDevSecrets } from './lib/secrets.ts';

const { values } = parseArgs({
  options: { tenant: { type: 'string' }, user: { type: 'string' }, ttl: { type: 'string', default: '1h' } },
});
if (!values.tenant || !values.user) {
  console.error('usage: npm run token -- --tenant T --user U [--ttl 1h]');
  process.exit(2);
}
const secret = process.env.AUTH_JWT_SECRET ?? loadDevSecrets(resolve(process.env.DATA_DIR ?? '.data')).jwtSecret;
console.log(
  await mintToken({
    secret,
    tenant: values.tenant,
    user: values.user,
    ttl: values.ttl,
    tenantClaim: process.env.AUTH_TENANT_CLAIM,
    userClaim: process.env.AUTH_USER_CLAIM,
  }),
);
