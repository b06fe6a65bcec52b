// How a virtual MCP server talks to its members: each request is a POST to this very process's
// /v1/proxy/{member}/stream, served in memory (in-process.ts), with the client's bearer token and the sealed mark of the server
// (via.ts), so it is admitted, priced, paid, limited, credentialed and recorded exactly as a
// direct call to the member is. The member's answer (JSON or server-sent events) is read here
// when the server needs its content (a list, a session's initialize), within a byte budget;
// otherwise it is relayed as it comes (endpoint.ts). A member session is opened lazily, the first
// time the client's session needs that member (a tools/list needs every member, a tools/call only
// its own), and kept in the client's session row (gateway/mcp-servers/sessions.ts), so another
// replica or a restarted process continues it; one that expired (the member answers 404 to a
// forwarded request) is opened again once, transparently.
import type { IncomingHttpHeaders } from 'node:http';
import type { Socket } from 'node:net';
import type Koa from 'koa';
import { createParser } from 'eventsource-parser';
import type { GatewayDb } from '../../gateway/db/orm.ts';
import type { ChangeFeed } from '../../gateway/db/change-feed.ts';
import { setMemberSession } from '../../gateway/mcp-servers/sessions.ts';
import { postInProcess, type InProcessReply } from './in-process.ts';

/** MCP's latest protocol version the gateway asks a member for. */
const MEMBER_PROTOCOL_VERSION = '2025-06-18';

/** Why a member could not be used: the gateway's answer on the member's URL (status, message) or its own reading. */
export class MemberError extends Error {
  readonly status: number | null;
  /** The budget that refused the member's call (its 429 `budget exceeded`), passed on to the client. */
  readonly budgetId: string | null;
  constructor(message: string, status: number | null, budgetId: string | null = null) {
    super(message);
    this.name = 'MemberError';
    this.status = status;
    this.budgetId = budgetId;
  }
}

/**
 * Where and as whom member requests go: this process's application (in-process.ts), as a
 * request on the client's connection and to its host, with the client's token and the server's seal.
 */
export type MemberLink = {
  app: Koa;
  socket: Socket;
  host: string;
  authorization: string;
  via: string;
  db: GatewayDb;
  feed: ChangeFeed;
  serverName: string;
};

/** The member session state of one client session (agent id → Mcp-Session-Id, '' for a member without sessions). */
export type SessionState = { id: string; members: Record<string, string> };

type Reply = InProcessReply;

/** Reads the rest of an answer the server has no use for (a 202, a 404 to resend). */
function discard(reply: Reply): Promise<void> {
  return new Promise((resolve) => {
    reply.body.once('end', resolve).once('close', resolve).resume();
  });
}

/** One JSON-RPC message POSTed to the member's streaming endpoint. */
export function postToMember(
  link: MemberLink,
  agentId: string,
  memberSession: string | undefined,
  message: unknown,
  signal?: AbortSignal,
): Promise<Reply> {
  const headers: Record<string, string> = {
    host: link.host,
    authorization: link.authorization,
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'x-gateway-mcp-server': link.via,
  };
  if (memberSession) headers['mcp-session-id'] = memberSession;
  return postInProcess(
    link.app,
    link.socket,
    `/v1/proxy/${agentId}/stream`,
    headers,
    Buffer.from(JSON.stringify(message)),
    signal,
  );
}

function header(headers: IncomingHttpHeaders, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** A refusal the gateway answered on the member's URL ({error}), as a MemberError with its status. */
export async function refusalOf(reply: Reply): Promise<MemberError> {
  const text = await readBounded(reply, 64 * 1024).catch(() => '');
  let message = `the member answered ${reply.statusCode}`;
  let budgetId: string | null = null;
  try {
    const parsed = JSON.parse(text) as { error?: unknown; budget_id?: unknown };
    if (typeof parsed.error === 'string') message = parsed.error;
    if (typeof parsed.budget_id === 'string') budgetId = parsed.budget_id;
  } catch {
    // not the gateway's JSON: the status says it
  }
  return new MemberError(message, reply.statusCode, budgetId);
}

/** The reply's body as it comes, at most `maxBytes` of it (then the reply is dropped and this throws). */
async function* chunksOf(reply: Reply, maxBytes: number): AsyncGenerator<Buffer> {
  let size = 0;
  for await (const chunk of reply.body) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) {
      reply.body.destroy();
      throw new MemberError(`the member's answer is larger than ${maxBytes} bytes`, null);
    }
    yield chunk as Buffer;
  }
}

async function readBounded(reply: Reply, maxBytes: number): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of chunksOf(reply, maxBytes)) chunks.push(chunk);
  return Buffer.concat(chunks).toString('utf8');
}

type RpcAnswer = { result?: unknown; error?: { code?: unknown; message?: unknown } };

function asAnswer(value: unknown, id: number): RpcAnswer | null {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return null;
  const message = value as { jsonrpc?: unknown; id?: unknown; result?: unknown; error?: unknown };
  if (message.jsonrpc !== '2.0' || message.id !== id || !('result' in message || 'error' in message)) return null;
  return message as RpcAnswer;
}

/** The JSON-RPC answer with this id in a member's reply (JSON or an event stream), within `maxBytes`. */
export async function readAnswer(reply: Reply, id: number, maxBytes: number): Promise<RpcAnswer> {
  const type = header(reply.headers, 'content-type') ?? '';
  if (!type.includes('text/event-stream')) {
    const text = await readBounded(reply, maxBytes);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new MemberError('the member answered invalid JSON', null);
    }
    const answer = asAnswer(parsed, id);
    if (!answer) throw new MemberError('the member answered no JSON-RPC response', null);
    return answer;
  }
  let found: RpcAnswer | null = null;
  const parser = createParser({
    onEvent(event) {
      if (found) return;
      try {
        found = asAnswer(JSON.parse(event.data), id);
      } catch {
        // an event that is not JSON: not the answer
      }
    },
  });
  for await (const chunk of chunksOf(reply, maxBytes)) {
    parser.feed(chunk.toString('utf8'));
    if (found) {
      reply.body.destroy();
      return found;
    }
  }
  throw new MemberError('the member answered no JSON-RPC response', null);
}

/** Opens a session with the member (initialize, then notifications/initialized): its id, '' for a member that keeps none. */
async function openMemberSession(link: MemberLink, agentId: string, signal?: AbortSignal): Promise<string> {
  const reply = await postToMember(
    link,
    agentId,
    undefined,
    {
      jsonrpc: '2.0',
      id: 0,
      method: 'initialize',
      params: {
        protocolVersion: MEMBER_PROTOCOL_VERSION,
        capabilities: {},
        clientInfo: { name: link.serverName, version: '1' },
      },
    },
    signal,
  );
  if (reply.statusCode !== 200) throw await refusalOf(reply);
  const sessionId = header(reply.headers, 'mcp-session-id') ?? '';
  const answer = await readAnswer(reply, 0, 256 * 1024);
  if (answer.error) throw new MemberError('the member refused to initialize', null);
  const initialized = await postToMember(
    link,
    agentId,
    sessionId,
    { jsonrpc: '2.0', method: 'notifications/initialized' },
    signal,
  );
  await discard(initialized);
  return sessionId;
}

/**
 * Member sessions being opened in this process, by client session and member: requests of one
 * client session that need the same member at once (a client's parallel calls) share one open
 * instead of each opening a session the client's row would keep only one of.
 */
const opening = new Map<string, Promise<string>>();

/** How long one shared open of a member's session may take, whoever waits on it. */
const OPEN_TIMEOUT_MS = 30_000;

/**
 * Opens the member's session for this client session and keeps it in the session's row. The open
 * is shared, so it runs under its own deadline, not under the first waiter's signal (a list's
 * short one would fail a call waiting on the same open); each waiter stops waiting at its own.
 */
function openMember(link: MemberLink, session: SessionState, agentId: string, signal?: AbortSignal): Promise<string> {
  const key = `${session.id}\n${agentId}`;
  let opened = opening.get(key);
  if (!opened) {
    opened = (async () => {
      try {
        const sessionId = await openMemberSession(link, agentId, AbortSignal.timeout(OPEN_TIMEOUT_MS));
        session.members[agentId] = sessionId;
        await setMemberSession(link.db, link.feed, session.id, agentId, sessionId);
        return sessionId;
      } catch (err) {
        if (err instanceof MemberError) throw err;
        throw new MemberError('the member did not open a session', null);
      }
    })().finally(() => opening.delete(key));
    opening.set(key, opened);
  }
  return signal ? untilAborted(opened, signal) : opened;
}

/** `work`'s answer, or a MemberError once `signal` aborts first (the work goes on for others). */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(new MemberError('the member did not answer in time', null));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new MemberError('the member did not answer in time', null));
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}

/**
 * `send` with the member's session, opened first when the client session has none for it; a
 * member answer of 404 to a request in a session (the gateway relayed it: it carries an
 * invocation id) is a session the member forgot, opened again once.
 */
export async function withMemberSession(
  link: MemberLink,
  session: SessionState,
  agentId: string,
  send: (memberSession: string | undefined) => Promise<Reply>,
  signal?: AbortSignal,
): Promise<Reply> {
  const open = () => openMember(link, session, agentId, signal);
  const memberSession = session.members[agentId] ?? (await open());
  const reply = await send(memberSession || undefined);
  if (reply.statusCode !== 404 || !memberSession || !header(reply.headers, 'x-gateway-invocation-id')) return reply;
  await discard(reply);
  return send((await open()) || undefined);
}
