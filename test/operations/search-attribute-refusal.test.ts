// Where the namespace lacks the project's search attributes and the process's role may not add
// them (Temporal Cloud, a restricted role), every process entry stops at start: one line on
// stderr naming the missing attributes and the command that creates them, exit code 1, no stack
// trace, nothing left listening. With the attributes there, the same processes on the same
// endpoint start normally.
//
// FAKE: the dev server cannot restrict a role, so `startRestrictedRoleRelay` stands in for a
// namespace whose role may not add search attributes: a gRPC-aware HTTP/2 relay in front of a
// real dev server that forwards every call except OperatorService/AddSearchAttributes, which it
// answers with PERMISSION_DENIED (grpc-status 7) as such a server does.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { resolve } from 'node:path';
import {
  connect as h2Connect,
  constants as h2,
  createServer as createH2Server,
  type ClientHttp2Session,
  type Http2Session,
  type IncomingHttpHeaders,
} from 'node:http2';
import type { AddressInfo } from 'node:net';
import { Connection } from '@temporalio/client';
import { stack } from '../support/stack.ts';
import { startBareTemporal, customAttributes, type BareTemporal } from '../support/bare-temporal.ts';
import { facilitatorEnv } from '../support/facilitator.ts';
import { callAt } from '../support/http.ts';
import { freePort, isPortFree } from '../../scripts/lib/ports.ts';
import { ensureSearchAttributes } from '../../temporal/search-attribute-setup.ts';
import { ALL_SEARCH_ATTRIBUTES } from '../../temporal/search-attributes.ts';

const ADD_SEARCH_ATTRIBUTES = '/temporal.api.operatorservice.v1.OperatorService/AddSearchAttributes';

type RestrictedRoleRelay = { address: string; readonly denied: number; readonly forwarded: number; close(): void };

/** FAKE (see the top of this file): plain gRPC in, plain gRPC out, AddSearchAttributes refused. */
async function startRestrictedRoleRelay(target: string): Promise<RestrictedRoleRelay> {
  const counts = { denied: 0, forwarded: 0 };
  const upstreams = new Map<Http2Session, ClientHttp2Session>();
  const server = createH2Server();
  server.on('session', (session) => {
    const upstream = h2Connect(`http://${target}`);
    upstream.on('error', () => session.destroy());
    upstreams.set(session, upstream);
    session.on('close', () => {
      upstream.close();
      upstreams.delete(session);
    });
  });
  server.on('stream', (stream, headers) => {
    if (headers[':path'] === ADD_SEARCH_ATTRIBUTES) {
      counts.denied += 1;
      stream.resume();
      stream.respond(
        {
          ':status': 200,
          'content-type': 'application/grpc',
          'grpc-status': '7', // PERMISSION_DENIED
          'grpc-message': 'Request unauthorized.',
        },
        { endStream: true },
      );
      return;
    }
    counts.forwarded += 1;
    const out = upstreams.get(stream.session!)!.request(headers);
    let trailers: IncomingHttpHeaders = {};
    stream.pipe(out);
    out.on('response', (response, flags) => {
      // A trailers-only answer (an error) is one HEADERS frame that ends the stream.
      if (flags & h2.NGHTTP2_FLAG_END_STREAM) return stream.respond(response, { endStream: true });
      stream.respond(response, { waitForTrailers: true });
      out.pipe(stream);
    });
    out.on('trailers', (t) => (trailers = t));
    stream.on('wantTrailers', () => stream.sendTrailers(trailers));
    out.on('error', () => stream.close(h2.NGHTTP2_INTERNAL_ERROR));
    stream.on('error', () => out.close(h2.NGHTTP2_CANCEL));
    stream.on('close', () => out.close(stream.rstCode));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return {
    address: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    get denied() {
      return counts.denied;
    },
    get forwarded() {
      return counts.forwarded;
    },
    close() {
      for (const upstream of upstreams.values()) upstream.destroy();
      server.close();
    },
  };
}

type Entry = {
  name: string;
  file: string;
  ready: string;
  /** Its environment on the relay, with the ports it would listen on. */
  env(relay: string): Promise<{ env: Record<string, string>; ports: number[] }>;
};

function gatewayEnv(relay: string): Record<string, string> {
  const s = stack();
  return {
    DATABASE_URL: s.config.databaseUrl,
    TEMPORAL_ADDRESS: relay,
    TEMPORAL_NAMESPACE: 'default',
    AUTH_JWT_SECRET: s.infra.secrets.jwtSecret,
    VAULT_ADDR: s.infra.vault.addr,
    VAULT_TOKEN: s.infra.vault.token,
    VAULT_KEKS: `dev:${s.infra.secrets.vaultKek}`,
    RECEIPT_KEYS_DIR: s.config.receipts.keysDir,
    LOG_LEVEL: 'info',
  };
}

const ENTRIES: Entry[] = [
  {
    name: 'API',
    file: 'api/main.ts',
    ready: 'gateway API listening',
    async env(relay) {
      const ports = [await freePort(), await freePort()];
      return {
        env: { ...gatewayEnv(relay), PORT: String(ports[0]), API_METRICS_PORT: String(ports[1]) },
        ports,
      };
    },
  },
  {
    name: 'gateway worker',
    file: 'temporal/gateway-worker-main.ts',
    ready: 'gateway worker running',
    async env(relay) {
      const ports = [await freePort()];
      return { env: { ...gatewayEnv(relay), WORKER_METRICS_PORT: String(ports[0]) }, ports };
    },
  },
  {
    name: 'facilitator',
    file: 'facilitator-service/main.ts',
    ready: 'facilitator listening',
    async env(relay) {
      const ports = [await freePort(), await freePort(), await freePort()];
      const env = facilitatorEnv(stack().infra, {
        TEMPORAL_ADDRESS: relay,
        FACILITATOR_PORT: String(ports[0]),
        FACILITATOR_PUBLIC_PORT: String(ports[1]),
        FACILITATOR_METRICS_PORT: String(ports[2]),
        // Its outbox sweeper would otherwise start other tests' settlements on this server.
        FACILITATOR_SWEEP_EVERY_MS: '0',
        LOG_LEVEL: 'info',
      });
      return { env, ports };
    },
  },
  {
    name: 'facilitator worker',
    file: 'temporal/facilitator-worker-main.ts',
    ready: 'facilitator worker running',
    async env(relay) {
      return { env: facilitatorEnv(stack().infra, { TEMPORAL_ADDRESS: relay, LOG_LEVEL: 'info' }), ports: [] };
    },
  },
];

type Run = { stdout: string; stderr: string; exit: Promise<number | null>; kill(): Promise<number | null> };

/** `node <file>` with exactly `env` on top of PATH: resolves `ready` once `line` appears on its output. */
function run(file: string, env: Record<string, string>, line: string): Run & { ready: Promise<void> } {
  const child = spawn(process.execPath, [file], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const result = { stdout: '', stderr: '' };
  const exit = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  const ready = new Promise<void>((resolveReady, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      result.stdout += chunk.toString();
      if (result.stdout.includes(line)) resolveReady();
    });
    child.stderr!.on('data', (chunk: Buffer) => (result.stderr += chunk.toString()));
    void exit.then((code) => reject(new Error(`${file} exited (${code}): ${result.stderr.slice(-2000)}`)));
  });
  ready.catch(() => undefined);
  return {
    get stdout() {
      return result.stdout;
    },
    get stderr() {
      return result.stderr;
    },
    exit,
    ready,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exit;
    },
  };
}

describe('a namespace without the search attributes, whose role may not add them', function () {
  this.timeout(240_000);
  let bare: BareTemporal;
  let relay: RestrictedRoleRelay;

  before(async () => {
    bare = await startBareTemporal('temporal-restricted-');
    relay = await startRestrictedRoleRelay(bare.dev.address);
  });
  after(async () => {
    relay?.close();
    await bare?.stop();
  });

  const names = ALL_SEARCH_ATTRIBUTES.map((key) => key.name);

  for (const entry of ENTRIES) {
    it(`${entry.name} (${entry.file}) stops at start with one line naming the attributes and the command`, async () => {
      const { env, ports } = await entry.env(relay.address);
      const deniedBefore = relay.denied;
      const child = run(resolve(entry.file), env, entry.ready);
      // One that starts anyway fails here at once rather than at the timeout.
      const code = await Promise.race([
        child.exit,
        child.ready.then(async () => {
          await child.kill();
          throw new Error(`${entry.file} started on a namespace without the attributes`);
        }),
      ]);
      assert.equal(code, 1, `exit code (stderr: ${child.stderr})`);
      assert.ok(relay.denied > deniedBefore, 'it asked to add the attributes and was refused');
      const lines = child.stderr.trimEnd().split('\n');
      assert.equal(lines.length, 1, `one line on stderr, got:\n${child.stderr}`);
      assert.doesNotMatch(child.stderr, /^ {4}at /m, 'no stack trace');
      for (const name of names) assert.match(lines[0], new RegExp(`\\b${name}\\b`), `names ${name}`);
      assert.match(lines[0], /temporal operator search-attribute create --namespace default /);
      assert.match(lines[0], /may not create them \(Request unauthorized\.\)/);
      assert.ok(!child.stdout.includes(entry.ready), 'it never got as far as running');
      for (const port of ports) assert.ok(await isPortFree(port), `nothing listens on ${port}`);
    });
  }

  it('nothing was registered behind the refusal', async () => {
    const present = Object.keys(await customAttributes(bare.dev.address));
    assert.deepEqual(
      names.filter((n) => present.includes(n)),
      [],
    );
  });

  it('with the attributes created by an operator, every process starts normally through the same relay', async () => {
    const plain = await Connection.connect({ address: bare.dev.address });
    try {
      assert.deepEqual((await ensureSearchAttributes(plain, 'default')).sort(), [...names].sort());
    } finally {
      await plain.close();
    }
    const started: Array<Run & { ready: Promise<void> }> = [];
    const deniedBefore = relay.denied;
    try {
      for (const entry of ENTRIES) {
        const { env, ports } = await entry.env(relay.address);
        const forwardedBefore = relay.forwarded;
        const child = run(resolve(entry.file), env, entry.ready);
        started.push(child);
        await child.ready;
        assert.ok(relay.forwarded > forwardedBefore, `${entry.name} reached Temporal through the relay`);
        if (entry.name === 'API') {
          const ready = await callAt(`http://127.0.0.1:${ports[0]}`, 'GET', '/readyz');
          assert.equal(ready.status, 200, ready.text);
        }
      }
      for (const child of [...started].reverse()) assert.equal(await child.kill(), 0, 'a clean stop on SIGTERM');
      assert.equal(relay.denied, deniedBefore, 'none of them asked to add attributes');
    } finally {
      await Promise.all(started.map((p) => p.kill()));
    }
  });
});
