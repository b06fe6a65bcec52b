// What a virtual MCP server's endpoint reads on every request, the server and the client's
// session, from the process's feed caches (gateway/db/feed-cache.ts) as the gate reads agents
// and policies: no round trip on a call's path. Every write to either table notifies the change
// feed (Migration20261206150000_mcp_server_cache); a server changed or removed, or a session
// ended, through the API is in force on every replica before the API answers (the writer
// publishes: management.ts, endSession below). A member session opened on one replica reaches
// the others with its notification; one that read the session just before reopens the member's
// session (members.ts), which is correct, only not shared.
import type { MikroORM } from '@mikro-orm/postgresql';
import { isId } from '../../lib/ids.ts';
import type { ChangeFeed } from '../db/change-feed.ts';
import { createFeedCache } from '../db/feed-cache.ts';
import { absent } from '../refusal.ts';
import type { McpServer, McpServerSession } from './entity.ts';
import type { SessionOwner } from './sessions.ts';

/** An Mcp-Session-Id the gateway mints: 32 random bytes, base64url (visible ASCII, as MCP requires). */
const SESSION_ID = /^[A-Za-z0-9_-]{43}$/;

/** How often a session in use has its `used_at` moved on (what retention reads), at most. */
const TOUCH_EVERY_MS = 3_600_000;

export type McpServerReads = {
  /** The tenant's server with this id; the refusal `absent` when there is none. */
  server(tenantId: string, id: string): Promise<McpServer>;
  /**
   * The owner's session with this id, or null (unknown, ended, purged by retention, or someone
   * else's). A session last marked used more than an hour ago is marked again: retention
   * (MCP_SERVER_SESSION_RETENTION_DAYS) purges the unused ones, and a write per request would
   * cost every call. `touch: false` only looks (a stream checking its session is still there).
   */
  session(id: string, owner: SessionOwner, touch?: boolean): Promise<McpServerSession | null>;
};

export function createMcpServerReads(orm: MikroORM, feed: ChangeFeed): McpServerReads {
  const keyed = (prefix: string) => (key: string) => (key.startsWith(prefix) ? key.slice(prefix.length) : null);
  // Unknown ids are not remembered: a server or session created a moment ago is found at once.
  const servers = createFeedCache<McpServer | null>(feed, {
    keyOf: keyed('mcp-server:'),
    cacheable: (server) => server !== null,
  });
  const sessions = createFeedCache<McpServerSession | null>(feed, {
    keyOf: keyed('mcp-session:'),
    cacheable: (session) => session !== null,
  });
  const sql = orm.em.getConnection();

  /** The row of `table` with this id, its columns camel-cased and its timestamps made dates; null when there is none. */
  async function readRow<T>(table: 'mcp_servers' | 'mcp_server_sessions', id: string): Promise<T | null> {
    const [row] = await sql.execute<Record<string, unknown>[]>(`select * from ${table} where id = ?`, [id]);
    if (!row) return null;
    const fields = Object.entries(row).map(([column, value]) => [
      column.replace(/_([a-z])/g, (_, letter: string) => letter.toUpperCase()),
      column.endsWith('_at') ? new Date(value as string) : value,
    ]);
    return Object.fromEntries(fields) as T;
  }

  return {
    async server(tenantId, id) {
      if (!isId('mcps', id)) throw absent();
      const server = await servers.get(id, () => readRow<McpServer>('mcp_servers', id));
      if (!server || server.tenantId !== tenantId) throw absent();
      return server;
    },
    async session(id, owner, touch = true) {
      if (!SESSION_ID.test(id)) return null;
      const session = await sessions.get(id, () => readRow<McpServerSession>('mcp_server_sessions', id));
      if (
        !session ||
        session.tenantId !== owner.tenantId ||
        session.serverId !== owner.serverId ||
        session.caller !== owner.caller
      )
        return null;
      if (touch && Date.now() - session.usedAt.getTime() > TOUCH_EVERY_MS)
        await sql.execute('update mcp_server_sessions set used_at = now() where id = ?', [id]);
      return session;
    },
  };
}
