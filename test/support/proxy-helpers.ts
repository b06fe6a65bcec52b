// Helpers shared by the proxy tests: raw local upstreams (the handler sees the request as it
// arrives, so tests can hold, stream or break an answer), agent creation, and direct reads of
// invocation rows.
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import assert from 'node:assert/strict';
import { stack } from './stack.ts';
import { waitFor } from './wait.ts';
import { call, uniqueName } from './http.ts';
import { once } from 'node:events';
import Koa from 'koa';
import Router from '@koa/router';
import { InvocationSchema, type Invocation } from '../../gateway/db/entities.ts';
import { errorMapper } from '../../api/errors.ts';
import { createVerifier, requireAuth, type AuthState } from '../../api/auth.ts';
import { createLogger } from '../../lib/log.ts';
import { proxyRoutes } from '../../api/routes/proxy.ts';
import { createProxyParts, type ProxyParts } from '../../api/proxy/pipeline-parts.ts';
import { invokeFastPath } from '../../api/invoke/fast-path.ts';
import { observeRequests } from '../../lib/observability/http.ts';
import type { AppDeps } from '../../api/deps.ts';
import type { GatewayConfig } from '../../gateway/config.ts';

export type RawUpstream = {
  url: string;
  port: number;
  server: Server;
  /** Requests seen so far (headers only; handlers read bodies themselves). */
  hits: IncomingMessage[];
  close(): Promise<void>;
};

export async function rawUpstream(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
  path = '/agent',
): Promise<RawUpstream> {
  const hits: IncomingMessage[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    hits.push(req);
    handler(req, res);
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}${path}`,
    port,
    server,
    hits,
    close: () =>
      new Promise((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

/** Reads a request body fully. */
export function readAll(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

export async function createAgent(token: string, fields: Record<string, unknown>): Promise<string> {
  const res = await call('POST', '/v1/agents', { token, json: { name: uniqueName(), ...fields } });
  assert.equal(res.status, 201, `agent create: ${res.text}`);
  return res.json.id as string;
}

export async function invocationRow(id: string): Promise<Invocation | null> {
  return stack().orm.em.fork().findOne(InvocationSchema, { id });
}

/** Polls the row until `done(row)` holds (streaming rows are completed just after the response ends). */
export async function waitForRow(
  id: string,
  done: (row: Invocation) => boolean = (r) => r.status === 'succeeded' || r.status === 'failed',
  timeoutMs = 15_000,
): Promise<Invocation> {
  let row: Invocation | null = null;
  return waitFor(
    async () => {
      row = await invocationRow(id);
      return row && done(row) && row;
    },
    { timeoutMs, everyMs: 50, what: `the row of invocation ${id}`, state: () => `it is ${row?.status ?? 'absent'}` },
  );
}

/** A port nothing listens on (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((r) => server.close(() => r()));
  return port;
}

/** A request through node:http, which (unlike undici) lets a test send hop-by-hop headers. */
export function nodeRequest(
  method: string,
  path: string,
  headers: Record<string, string>,
  body: string | Buffer,
): Promise<{ status: number; headers: IncomingMessage['headers']; text: string; json: any }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `${stack().apiUrl}${path}`,
      { method, headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) } },
      (res) => {
        void readAll(res).then((buf) => {
          const text = buf.toString();
          let json: unknown;
          try {
            json = text ? JSON.parse(text) : undefined;
          } catch {
            json = undefined;
          }
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json });
        }, reject);
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/** The dependencies of a gateway app on the stack's database, Temporal and auth, with `configPatch` over its configuration. */
export function proxyAppDeps(configPatch: Partial<GatewayConfig> = {}): AppDeps {
  return {
    config: { ...stack().config, ...configPatch },
    orm: stack().orm,
    temporal: stack().temporal,
    log: createLogger('test-proxy', 'silent'),
    feed: stack().feed,
    vaultClient: stack().vaultClient,
    version: { name: 'test', version: '0.0.0', commit: null },
    readiness: async () => ({ database: true, temporal: true }),
  };
}

/**
 * A gateway app of the proxy routes alone, on the stack's database, Temporal and auth, with
 * its own configuration and services: what the SSRF and rate-limit tests need to run under
 * an empty allow-list, a rebinding resolver or a shared Redis limiter. The invoke endpoints
 * take the invoke fast path, as in the API (api/invoke/fast-path.ts); the poll goes through the router.
 */
export async function startProxyApp(
  configPatch: Partial<GatewayConfig> = {},
  overrides: Partial<ProxyParts> = {},
): Promise<{ url: string; services: ProxyParts; close(): Promise<void> }> {
  const deps = proxyAppDeps(configPatch);
  const services = createProxyParts(deps, overrides);
  const app = new Koa();
  app.silent = true;
  const verify = createVerifier(deps.config.auth);
  app.use(invokeFastPath(deps, services, { verify, observe: observeRequests('test', deps.log) }));
  app.use(errorMapper(deps.log));
  const v1 = new Router<AuthState>({ prefix: '/v1' });
  v1.use(requireAuth(verify));
  const routes = proxyRoutes(deps, services);
  v1.use(routes.routes(), routes.allowedMethods());
  app.use(v1.routes());
  const server = app.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    services,
    close: async () => {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
      await services.limiter.close();
      await services.upstream.close();
    },
  };
}
