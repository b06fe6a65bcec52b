// GET on a virtual MCP server's endpoint: the session's stream of server-initiated messages
// (MCP streamable HTTP), which the MCP SDK client opens by itself after initialize. What the
// server says on it is that its lists changed: its membership or a member agent changed (a
// member added, removed, deleted, suspended, unsuspended, repriced: `notifications/tools/
// list_changed`, and the prompts' and resources'), or the tenant's policy did (the tools a caller
// may see); the change feed (gateway/db/change-feed.ts) brings each change to every replica, so
// a change made on one reaches a stream held on another. Bounds: one stream per session (a new
// GET ends the one open before it, on any replica: `mcp-stream:<session>:<nonce>` on the feed's
// channel), MAX_STREAMS_PER_TENANT on each process (429 past it), each ended after
// STREAM_LIFETIME_MS (the client opens it again, on whichever replica it reaches) and at once
// when its session or server ends, or the process begins to stop (AppDeps.stopping).
import { randomUUID } from 'node:crypto';
import { PassThrough } from 'node:stream';
import type { Context } from 'koa';
import type { ChangeFeed } from '../../gateway/db/change-feed.ts';
import type { GatewayDb } from '../../gateway/db/orm.ts';
import type { McpServerReads } from '../../gateway/mcp-servers/reads.ts';
import { announceStream, type SessionOwner } from '../../gateway/mcp-servers/sessions.ts';
import type { McpServer } from '../../gateway/mcp-servers/entity.ts';
import type { Logger } from '../../lib/log.ts';
import { mcpServerStreams } from '../../gateway/metrics.ts';
import { ApiError } from '../errors.ts';

/** Open streams one tenant may hold on one process. */
const MAX_STREAMS_PER_TENANT = 64;
/** How long one stream stays open before the server ends it (the client reopens it). */
const STREAM_LIFETIME_MS = 10 * 60_000;
/** A comment line this often keeps proxies from closing an idle stream. */
const KEEPALIVE_MS = 20_000;
/** Changes arriving within this long are told once. */
const COALESCE_MS = 25;

const ALL_LISTS = ['tools', 'prompts', 'resources'] as const;
type List = (typeof ALL_LISTS)[number];

type Stream = {
  nonce: string;
  owner: SessionOwner;
  sessionId: string;
  members: Set<string>;
  body: PassThrough;
  pending: Set<List>;
  timer: NodeJS.Timeout | null;
  end: () => void;
  /** Frees the stream's place at once (its body's end may come later). */
  release: () => void;
};

export type McpStreams = {
  /** Answers the GET with the session's stream (the caller has checked the server and the session). */
  open(ctx: Context, server: McpServer, owner: SessionOwner, sessionId: string): Promise<void>;
};

export function createMcpStreams(deps: {
  orm: GatewayDb;
  feed: ChangeFeed;
  log: Logger;
  reads: McpServerReads;
  stopping?: AbortSignal;
}): McpStreams {
  const { feed, reads, log } = deps;
  const bySession = new Map<string, Stream>();
  const perTenant = new Map<string, number>();
  // The nonces this process announced and has not heard back yet: its own announcement, heard
  // after a later GET replaced that stream here, must not end the newer one.
  const ownNonces = new Set<string>();

  function tell(stream: Stream, lists: readonly List[]): void {
    for (const list of lists) stream.pending.add(list);
    stream.timer ??= setTimeout(() => {
      stream.timer = null;
      if (stream.body.writableEnded) return;
      for (const list of stream.pending)
        stream.body.write(
          `event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: `notifications/${list}/list_changed` })}\n\n`,
        );
      stream.pending.clear();
    }, COALESCE_MS);
  }

  /** The server changed or went: its streams told, or ended. */
  async function serverChanged(serverId: string): Promise<void> {
    for (const stream of bySession.values()) {
      if (stream.owner.serverId !== serverId) continue;
      const server = await reads.server(stream.owner.tenantId, serverId).catch(() => null);
      if (!server) {
        stream.end();
        continue;
      }
      stream.members = new Set(server.members.map((m) => m.agentId));
      tell(stream, ALL_LISTS);
    }
  }

  /** A session row changed (a member session opened, its use marked) or went: ended when it went. */
  async function sessionChanged(sessionId: string): Promise<void> {
    const stream = bySession.get(sessionId);
    if (stream && !(await reads.session(sessionId, stream.owner, false))) stream.end();
  }

  feed.subscribe((key) => {
    if (bySession.size === 0) return;
    const [kind, id, nonce] = key.split(':');
    if (key === '*') {
      // The feed was lost (or is new): anything may have changed meanwhile, a session's end included.
      for (const stream of bySession.values()) tell(stream, ALL_LISTS);
      for (const sessionId of bySession.keys()) void sessionChanged(sessionId).catch(() => {});
    } else if (kind === 'agent') {
      for (const stream of bySession.values()) if (stream.members.has(id)) tell(stream, ALL_LISTS);
    } else if (kind === 'policy') {
      for (const stream of bySession.values()) if (stream.owner.tenantId === id) tell(stream, ['tools']);
    } else if (kind === 'mcp-server') void serverChanged(id).catch(() => {});
    else if (kind === 'mcp-session') void sessionChanged(id).catch(() => {});
    else if (kind === 'mcp-stream') {
      // A newer stream of the session, opened on some replica: this one gives way.
      if (ownNonces.delete(nonce)) return;
      const stream = bySession.get(id);
      if (stream && stream.nonce !== nonce) stream.end();
    }
  });

  const closeAll = () => {
    for (const stream of bySession.values()) stream.end();
  };
  deps.stopping?.addEventListener('abort', closeAll, { once: true });

  return {
    async open(ctx, server, owner, sessionId) {
      const accept = ctx.get('accept');
      if (deps.stopping?.aborted) throw new ApiError(503, 'the gateway is stopping');
      if (!accept.includes('text/event-stream')) throw new ApiError(406, 'Accept must include text/event-stream');
      // The stream this GET replaces gives its place up before the count is read, and this one
      // takes its place before anything is awaited: concurrent GETs of one session leave one
      // stream, and every stream counts against the tenant's bound.
      const replaced = bySession.get(sessionId);
      replaced?.end();
      replaced?.release();
      const held = perTenant.get(owner.tenantId) ?? 0;
      if (held >= MAX_STREAMS_PER_TENANT)
        throw new ApiError(429, `a tenant may hold ${MAX_STREAMS_PER_TENANT} MCP streams on one replica`);
      const nonce = randomUUID();
      const body = new PassThrough();
      let released = false;
      const stream: Stream = {
        nonce,
        owner,
        sessionId,
        members: new Set(server.members.map((m) => m.agentId)),
        body,
        pending: new Set(),
        timer: null,
        end: () => body.end(),
        release: () => {
          if (released) return;
          released = true;
          clearInterval(keepalive);
          clearTimeout(lifetime);
          if (stream.timer) clearTimeout(stream.timer);
          if (bySession.get(sessionId) === stream) bySession.delete(sessionId);
          const left = (perTenant.get(owner.tenantId) ?? 1) - 1;
          if (left > 0) perTenant.set(owner.tenantId, left);
          else perTenant.delete(owner.tenantId);
          mcpServerStreams.dec();
        },
      };
      const keepalive = setInterval(() => body.writableEnded || body.write(': keepalive\n\n'), KEEPALIVE_MS);
      const lifetime = setTimeout(() => stream.end(), STREAM_LIFETIME_MS);
      body.once('close', stream.release);
      body.once('end', stream.release);
      ctx.res.once('close', () => body.destroy());
      bySession.set(sessionId, stream);
      perTenant.set(owner.tenantId, held + 1);
      mcpServerStreams.inc();
      // Any other replica holding a stream of this session ends it (the feed's channel reaches them all).
      ownNonces.add(nonce);
      setTimeout(() => ownNonces.delete(nonce), 60_000).unref();
      try {
        await announceStream(deps.orm, sessionId, nonce);
      } catch (err) {
        stream.end();
        stream.release();
        throw err;
      }

      ctx.status = 200;
      ctx.set('Content-Type', 'text/event-stream');
      ctx.set('Cache-Control', 'no-cache');
      ctx.set('X-Accel-Buffering', 'no');
      ctx.set('Mcp-Session-Id', sessionId);
      ctx.body = body;
      // The head goes now (a client knows its stream is open), with how soon to reopen one ended.
      // (A newer GET may have taken the session's place meanwhile: this stream has ended then.)
      if (!body.writableEnded) body.write('retry: 1000\n\n');
      log.debug(
        { mcpServer: server.id, requestId: (ctx.state as { requestId?: string }).requestId },
        'MCP stream open',
      );
    },
  };
}
