// A TCP relay in front of a real server, for failures that cannot be had on cue otherwise: a
// request that reaches the server while its answer never comes back (a lost reply, a network
// that fails one way). Everything the client sends is forwarded; what the server sends back is
// dropped while `swallowReplies` is on. Dropping bytes mid-stream breaks the protocol above
// (HTTP/2 framing, HPACK), so `cut()` closes every relayed connection afterwards. While `down`
// is on, new connections are closed at once (with `cut()`: the server unreachable). While
// `holdMatching` is set, a new connection whose first bytes contain it (a PostgreSQL startup
// message names its application_name) is held: accepted, never forwarded, never answered, so
// the client's connect hangs while its other connections work.
import { connect, createServer, type Socket } from 'node:net';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';

export type TcpRelay = {
  address: string;
  swallowReplies: boolean;
  down: boolean;
  holdMatching: string | null;
  cut(): void;
  close(): Promise<void>;
};

export async function startTcpRelay(target: string): Promise<TcpRelay> {
  const [host, port] = [target.slice(0, target.lastIndexOf(':')), Number(target.slice(target.lastIndexOf(':') + 1))];
  const sockets = new Set<Socket>();
  const relay: TcpRelay = {
    address: '',
    swallowReplies: false,
    down: false,
    holdMatching: null,
    cut() {
      for (const socket of sockets) socket.destroy();
      sockets.clear();
    },
    async close() {
      relay.cut();
      server.close();
      await once(server, 'close');
    },
  };
  const server = createServer((client) => {
    if (relay.down) return client.destroy();
    const hold = relay.holdMatching;
    if (hold === null) return forward(client);
    sockets.add(client);
    client.on('error', () => undefined);
    client.once('data', (first: Buffer) => {
      if (first.includes(hold)) return; // held: nothing forwarded, nothing answered
      forward(client, first);
    });
  });
  function forward(client: Socket, first?: Buffer): void {
    const upstream = connect(port, host);
    if (first) upstream.write(first);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => {
        sockets.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    client.on('data', (chunk: Buffer) => upstream.write(chunk));
    upstream.on('data', (chunk: Buffer) => {
      if (!relay.swallowReplies) client.write(chunk);
    });
  }
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  relay.address = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  return relay;
}
