// A second API replica in the test process: the stack's database and Temporal, its own caches,
// rate window and listener (on a free port), with `overrides` over the stack's configuration.
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startGateway } from '../../api/wiring.ts';
import { createLogger } from '../../lib/log.ts';
import { stack } from './stack.ts';

export async function replica(
  overrides: Record<string, unknown> = {},
): Promise<{ url: string; close(): Promise<void> }> {
  const s = stack();
  const server: Server = await startGateway(
    { ...s.config, port: 0, ...overrides } as typeof s.config,
    s.orm,
    s.temporal,
    createLogger('replica', 'silent'),
  );
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
