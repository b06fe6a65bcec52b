// Process entry: `node facilitator/main.ts`. HTTPS with mutual TLS on FACILITATOR_PORT (a
// client without a certificate from our CA fails the handshake), plain HTTP for the
// read-only endpoints on FACILITATOR_PUBLIC_PORT.
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createHttpServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { JsonRpcProvider } from 'ethers';
import { loadFacilitatorConfig } from './config.ts';
import { createMutualTlsApp, createPublicApp } from './app.ts';
import { createLogger } from '../api/log.ts';

const log = createLogger('facilitator');
const config = loadFacilitatorConfig();
const provider = new JsonRpcProvider(config.chainRpcUrl, 8453, { staticNetwork: true });
const deps = { config, provider };

const tlsServer = createHttpsServer(
  {
    cert: readFileSync(config.tls.certFile),
    key: readFileSync(config.tls.keyFile),
    ca: readFileSync(config.tls.caFile),
    requestCert: true,
    rejectUnauthorized: true,
  },
  createMutualTlsApp(deps).callback(),
);
const publicServer = createHttpServer(createPublicApp(deps).callback());
tlsServer.listen(config.port, config.host);
publicServer.listen(config.publicPort, config.host);
log.info({ port: config.port, publicPort: config.publicPort }, 'facilitator listening');

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    tlsServer.close();
    publicServer.close();
    provider.destroy();
    process.exit(0);
  });
}
