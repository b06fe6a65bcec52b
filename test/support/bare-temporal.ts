// A second Temporal dev server started WITHOUT the project's search attributes, as a fresh
// cluster or a Temporal Cloud namespace would be, and what tests put in front of it: a TLS
// terminator that requires client certificates (node:tls, the same PKI code `npm start` uses),
// so the processes reach it as they would a cluster behind a TLS endpoint.
import { connect as netConnect, type AddressInfo } from 'node:net';
import { createServer as createTlsServer } from 'node:tls';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Connection } from '@temporalio/client';
import { startTemporalDevServer, type DevServer } from '../../scripts/dev/temporal-dev-server.ts';
import { ensureTool } from '../../scripts/lib/tools.ts';
import { freePort } from '../../scripts/lib/ports.ts';
import type { DevPki } from '../../scripts/dev/pki.ts';

export type BareTemporal = { dev: DevServer; dir: string; stop(): Promise<void> };

/** A dev server in a folder of its own, namespace `default`, no custom search attributes. */
export async function startBareTemporal(prefix: string): Promise<BareTemporal> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const dev = await startTemporalDevServer({
    binary: ensureTool('temporal'),
    dbFile: join(dir, 'temporal.db'),
    port: await freePort(),
    namespace: 'default',
    searchAttributes: false,
  });
  return {
    dev,
    dir,
    async stop() {
      await dev.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The namespace's custom search attributes, read over a plain connection to the server itself. */
export async function customAttributes(address: string): Promise<Record<string, unknown>> {
  const plain = await Connection.connect({ address });
  try {
    return (await plain.operatorService.listSearchAttributes({ namespace: 'default' })).customAttributes ?? {};
  } finally {
    await plain.close();
  }
}

export type TlsTerminator = { address: string; readonly handshakes: number; close(): void };

/** TLS (client certificates from `pki`'s CA required, ALPN h2) in front of plain gRPC at `target`. */
export async function startTlsTerminator(pki: DevPki, target: string): Promise<TlsTerminator> {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  const state = { handshakes: 0 };
  const server = createTlsServer(
    {
      cert: pki.serverCertPem,
      key: pki.serverKeyPem,
      ca: pki.caCertPem,
      requestCert: true,
      rejectUnauthorized: true,
      ALPNProtocols: ['h2'],
    },
    (client) => {
      state.handshakes += 1;
      const upstream = netConnect(port, host);
      client.pipe(upstream).pipe(client);
      for (const s of [client, upstream])
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
    },
  );
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    get handshakes() {
      return state.handshakes;
    },
    close: () => server.close(),
  };
}
