// A client's session with a virtual MCP server, in PostgreSQL so that it survives a restart of
// the API and continues on any replica: which server, whose (the tenant and the token's user),
// and the member sessions opened for it so far (member agent id → the member's Mcp-Session-Id),
// and when it was last used: one unused for MCP_SERVER_SESSION_RETENTION_DAYS is purged by the
// hourly retention run (workflows/retention.ts).
import { randomBytes } from 'node:crypto';
import type { GatewayDb } from '../db/orm.ts';
import { McpServerSessionSchema, type McpServerSession } from './entity.ts';

/** Whose session it is: only the same tenant, server and user continue it. */
export type SessionOwner = { tenantId: string; serverId: string; caller: string };

/** An Mcp-Session-Id the gateway mints: 32 random bytes, base64url (visible ASCII, as MCP requires). */
const SESSION_ID = /^[A-Za-z0-9_-]{43}$/;

export async function openSession(db: GatewayDb, owner: SessionOwner): Promise<string> {
  const em = db.em.fork();
  const now = new Date();
  const id = randomBytes(32).toString('base64url');
  em.create(McpServerSessionSchema, { id, ...owner, memberSessions: {}, createdAt: now, usedAt: now });
  await em.flush();
  return id;
}

/** How often a session in use has its `used_at` moved on (what retention reads), at most. */
const TOUCH_EVERY_MS = 3_600_000;

/**
 * The owner's session with this id, or null (unknown, ended, purged by retention, or someone
 * else's). A session last marked used more than an hour ago is marked again: retention
 * (MCP_SERVER_SESSION_RETENTION_DAYS) purges the unused ones, and a write per request would cost
 * every call.
 */
export async function findSession(db: GatewayDb, id: string, owner: SessionOwner): Promise<McpServerSession | null> {
  if (!SESSION_ID.test(id)) return null;
  const em = db.em.fork();
  const session = await em.findOne(McpServerSessionSchema, { id, ...owner });
  if (session && Date.now() - session.usedAt.getTime() > TOUCH_EVERY_MS)
    await em.getConnection().execute('update mcp_server_sessions set used_at = now() where id = ?', [id]);
  return session;
}

/** Records (or, with null, forgets) the member session opened for this client session. */
export async function setMemberSession(
  db: GatewayDb,
  id: string,
  agentId: string,
  memberSession: string | null,
): Promise<void> {
  const sql =
    memberSession === null
      ? 'update mcp_server_sessions set member_sessions = member_sessions - ?, used_at = now() where id = ?'
      : 'update mcp_server_sessions set member_sessions = member_sessions || jsonb_build_object(?::text, ?::text), used_at = now() where id = ?';
  await db.em
    .fork()
    .getConnection()
    .execute(sql, memberSession === null ? [agentId, id] : [agentId, memberSession, id]);
}

/** Ends the session; the member sessions it had opened, to be closed by the caller. */
export async function endSession(
  db: GatewayDb,
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
  return rows[0]?.member_sessions ?? null;
}
