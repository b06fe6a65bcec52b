// A client's session with a virtual MCP server, in PostgreSQL so that it survives a restart of
// the API and continues on any replica: which server, whose (the tenant and the token's user),
// and the member sessions opened for it so far (member agent id → the member's Mcp-Session-Id),
// and when it was last used: one unused for MCP_SERVER_SESSION_RETENTION_DAYS is purged by the
// hourly retention run (workflows/retention.ts). Read through the process's cache (reads.ts).
import { randomBytes } from 'node:crypto';
import type { GatewayDb } from '../db/orm.ts';
import { CHANGE_FEED_CHANNEL, type ChangeFeed } from '../db/change-feed.ts';
import { McpServerSessionSchema } from './entity.ts';

/** Whose session it is: only the same tenant, server and user continue it. */
export type SessionOwner = { tenantId: string; serverId: string; caller: string };

export async function openSession(db: GatewayDb, owner: SessionOwner): Promise<string> {
  const em = db.em.fork();
  const now = new Date();
  const id = randomBytes(32).toString('base64url');
  em.create(McpServerSessionSchema, { id, ...owner, memberSessions: {}, createdAt: now, usedAt: now });
  await em.flush();
  return id;
}

/** Records the member session opened for this client session (this process's cache forgets the row at once). */
export async function setMemberSession(
  db: GatewayDb,
  feed: ChangeFeed,
  id: string,
  agentId: string,
  memberSession: string,
): Promise<void> {
  await db.em
    .fork()
    .getConnection()
    .execute(
      'update mcp_server_sessions set member_sessions = member_sessions || jsonb_build_object(?::text, ?::text), used_at = now() where id = ?',
      [agentId, memberSession, id],
    );
  feed.invalidate(`mcp-session:${id}`);
}

/**
 * Ends the session, on every replica before this resolves (reads.ts); the member sessions it
 * had opened, to be closed by the caller.
 */
export async function endSession(
  db: GatewayDb,
  feed: ChangeFeed,
  id: string,
  owner: SessionOwner,
): Promise<Record<string, string> | null> {
  const rows = await db.em
    .fork()
    .getConnection()
    .execute<{ member_sessions: Record<string, string> }[]>(
      'delete from mcp_server_sessions where id = ? and tenant_id = ? and server_id = ? and caller = ? returning member_sessions',
      [id, owner.tenantId, owner.serverId, owner.caller],
    );
  if (!rows[0]) return null;
  feed.invalidate(`mcp-session:${id}`);
  await feed.publish();
  return rows[0].member_sessions;
}

/**
 * Tells every replica that a new GET stream of the session is open (`nonce` names it): one
 * holding an older stream of the session ends it (api/mcp-servers/streams.ts). Said on the
 * change feed's channel, which every replica listens to.
 */
export async function announceStream(db: GatewayDb, sessionId: string, nonce: string): Promise<void> {
  await db.em
    .fork()
    .getConnection()
    .execute('select pg_notify(?, ?)', [CHANGE_FEED_CHANNEL, `mcp-stream:${sessionId}:${nonce}`]);
}
