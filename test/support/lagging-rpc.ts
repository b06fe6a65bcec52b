// A JSON-RPC relay in front of the real anvil that can lag behind it, as a load-balanced RPC
// endpoint does: while lagging it answers "no receipt yet" for every transaction (and has no
// synchronous send), so a transaction anvil already mined looks unmined to the facilitator.
// Everything else is anvil's own answer. It stops lagging by itself once it relays a cancel
// (a send from an account to itself), which lets a test stage "the transfer was mined just
// before the facilitator replaced it".
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Transaction } from 'ethers';

export type LaggingRpc = {
  url: string;
  /** Hide receipts until a cancel is relayed. */
  lagUntilCancel(): void;
  /** The cancels relayed (their hashes), whether anvil took them or not. */
  cancelsSeen: string[];
  close(): Promise<void>;
};

type RpcCall = { id: unknown; method: string; params?: unknown[] };

const isCancel = (raw: unknown) => {
  try {
    const tx = Transaction.from(String(raw));
    return !!tx.to && tx.to.toLowerCase() === tx.from?.toLowerCase();
  } catch {
    return false;
  }
};

export async function startLaggingRpc(upstreamUrl: string): Promise<LaggingRpc> {
  let lagging = false;
  const cancelsSeen: string[] = [];

  async function relay(call: RpcCall): Promise<unknown> {
    if (call.method === 'eth_sendRawTransaction' && isCancel(call.params?.[0])) {
      cancelsSeen.push(Transaction.from(String(call.params![0])).hash!);
      lagging = false;
    }
    if (lagging && call.method === 'eth_getTransactionReceipt') return { jsonrpc: '2.0', id: call.id, result: null };
    if (lagging && call.method === 'eth_sendRawTransactionSync')
      return { jsonrpc: '2.0', id: call.id, error: { code: -32601, message: 'method not supported' } };
    const res = await fetch(upstreamUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(call),
    });
    return res.json();
  }

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      void (async () => {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as RpcCall | RpcCall[];
        const answer = Array.isArray(body) ? await Promise.all(body.map(relay)) : await relay(body);
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
      })().catch(() => res.writeHead(502).end());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    lagUntilCancel: () => {
      lagging = true;
    },
    cancelsSeen,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
