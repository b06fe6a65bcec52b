// /v1/mcp-servers/{id}/mcp: a virtual MCP server's endpoint (streamable HTTP). It answers
// initialize itself (its own serverInfo, what it federates, a session of its own kept in
// PostgreSQL, no member asked yet: gateway/mcp-servers/sessions.ts), federates the members' lists (tools, prompts, resources and
// resource templates: every page of each member's, named `{prefix}_{name}` where MCP names them,
// filtered by the member's allow-list and, for tools, by the tenant's policy for this caller),
// each member given a bounded time, and routes a call to its member as an invocation of that
// member (members.ts: this process's /v1/proxy/{member}/stream, served in memory), whose answer is relayed
// as it comes. DELETE ends the session and the member sessions it opened.
import type { Context } from 'koa';
import {
  isInitializeRequest,
  LATEST_PROTOCOL_VERSION,
  SUPPORTED_PROTOCOL_VERSIONS,
} from '@modelcontextprotocol/sdk/types.js';
import { notFound } from '../errors.ts';
import { createMcpServerReads } from '../../gateway/mcp-servers/reads.ts';
import { endSession, openSession, type SessionOwner } from '../../gateway/mcp-servers/sessions.ts';
import { allowedByList, routeName } from '../../gateway/mcp-servers/names.ts';
import type { McpServer, McpServerMember } from '../../gateway/mcp-servers/entity.ts';
import { mcpServerMemberFailures } from '../../gateway/metrics.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';
import { sealVia } from './via.ts';
import { createMcpStreams } from './streams.ts';
import {
  MemberError,
  postToMember,
  readAnswer,
  refusalOf,
  withMemberSession,
  type MemberLink,
  type SessionState,
} from './members.ts';

/**
 * What the server offers at initialize: every kind it federates, each able to change. Its
 * members are not asked (their sessions are opened lazily, the first time one is needed), and
 * its membership may change during the session (a member added, removed or suspended: the
 * server says so on its GET stream, streams.ts); a kind no member offers is an empty list.
 */
const CAPABILITIES = {
  tools: { listChanged: true },
  prompts: { listChanged: true },
  resources: { listChanged: true },
} as const;

/** How long a federated list waits for each member. */
const MEMBER_LIST_TIMEOUT_MS = 3_000;
/** Pages of one member's list read at most, and entries kept. */
const MAX_PAGES = 20;
const MAX_ENTRIES = 2_000;
/** Bytes of one page of a member's list. */
const MAX_PAGE_BYTES = 4 * 1024 * 1024;
/** An MCP tool name (SEP-986): what a member's tool must be called to be listed. */
const TOOL_NAME = /^[A-Za-z0-9_.-]{1,128}$/;

type Ctx = Context & { state: AuthState; params: Record<string, string> };
type Rpc = { jsonrpc: '2.0'; id?: string | number | null; method: string; params?: Record<string, unknown> };

/** What each federated list is: its method, the key of its entries, and whether the names are prefixed. */
const LISTS = {
  'tools/list': { key: 'tools', named: true },
  'prompts/list': { key: 'prompts', named: true },
  'resources/list': { key: 'resources', named: false },
  'resources/templates/list': { key: 'resourceTemplates', named: false },
} as const;
type ListMethod = keyof typeof LISTS;

const rpcError = (id: Rpc['id'], code: number, message: string, data?: unknown) => ({
  jsonrpc: '2.0',
  id: id ?? null,
  error: { code, message, ...(data === undefined ? {} : { data }) },
});

/** The JSON-RPC request of the body, or null when it is not one. */
/** A member's refusal as the client gets it: its status, and the budget that refused it when one did. */
const refusalRpc = (id: Rpc['id'], err: MemberError) =>
  rpcError(
    id,
    -32000,
    err.message,
    err.budgetId ? { status: err.status, budget_id: err.budgetId } : { status: err.status },
  );

function rpcOf(body: unknown): Rpc | null {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return null;
  const rpc = body as Partial<Rpc>;
  if (rpc.jsonrpc !== '2.0' || typeof rpc.method !== 'string') return null;
  if (rpc.params !== undefined && (rpc.params === null || typeof rpc.params !== 'object')) return null;
  return rpc as Rpc;
}

/** How long ending one member session may take. */
const MEMBER_CLOSE_TIMEOUT_MS = 3_000;

export function mcpServerEndpoint(
  deps: AppDeps,
  services: Pick<ProxyParts, 'policy' | 'agents' | 'credentials' | 'upstream'>,
) {
  const reads = createMcpServerReads(deps.orm, deps.feed);
  const streams = createMcpStreams({ ...deps, reads });

  function linkOf(ctx: Ctx, server: McpServer): MemberLink {
    return {
      app: ctx.app,
      socket: ctx.req.socket,
      host: ctx.get('host') || 'localhost',
      authorization: ctx.get('authorization'),
      via: sealVia(server.tenantId, server.id),
      db: deps.orm,
      feed: deps.feed,
      serverName: server.name,
    };
  }

  /** Every page of one member's list, or a MemberError. */
  async function memberList(
    link: MemberLink,
    session: SessionState,
    member: McpServerMember,
    method: ListMethod,
    signal: AbortSignal,
  ): Promise<unknown[]> {
    const entries: unknown[] = [];
    let cursor: string | undefined;
    for (let page = 1; page <= MAX_PAGES; page++) {
      const message = { jsonrpc: '2.0', id: page, method, params: cursor ? { cursor } : {} };
      const reply = await withMemberSession(
        link,
        session,
        member.agentId,
        (sid) => postToMember(link, member.agentId, sid, message, signal),
        signal,
      );
      if (reply.statusCode !== 200) throw await refusalOf(reply);
      const answer = await readAnswer(reply, page, MAX_PAGE_BYTES);
      // A member without this kind of entry (prompts, resources) has an empty list of them.
      if (answer.error) return entries;
      const result = answer.result as Record<string, unknown> | null;
      const listed = result?.[LISTS[method].key];
      if (!Array.isArray(listed)) throw new MemberError('the member answered a list that is not one', null);
      entries.push(...listed);
      if (entries.length > MAX_ENTRIES) throw new MemberError(`the member lists more than ${MAX_ENTRIES}`, null);
      cursor = typeof result?.nextCursor === 'string' && result.nextCursor !== '' ? result.nextCursor : undefined;
      if (!cursor) break;
    }
    return entries;
  }

  /** The federated list: each member's within the bound, those that did not answer left out (logged, counted). */
  async function federatedList(ctx: Ctx, server: McpServer, session: SessionState, method: ListMethod) {
    const link = linkOf(ctx, server);
    const signal = AbortSignal.timeout(MEMBER_LIST_TIMEOUT_MS);
    const settled = await Promise.allSettled(
      server.members.map((member) => memberList(link, session, member, method, signal)),
    );
    const { key, named } = LISTS[method];
    const seen = new Set<string>();
    const merged: unknown[] = [];
    for (const [index, outcome] of settled.entries()) {
      const member = server.members[index];
      if (outcome.status === 'rejected') {
        memberLeftOut(ctx, server, member, method, signal, outcome.reason);
        continue;
      }
      for (const entry of outcome.value) {
        if (entry === null || typeof entry !== 'object' || Array.isArray(entry)) continue;
        const item = entry as Record<string, unknown>;
        if (!named) {
          const uri =
            typeof item.uri === 'string' ? item.uri : typeof item.uriTemplate === 'string' ? item.uriTemplate : null;
          if (uri === null || seen.has(uri)) continue;
          seen.add(uri);
          merged.push(item);
          continue;
        }
        const name = item.name;
        if (typeof name !== 'string' || !TOOL_NAME.test(name)) continue;
        const prefixed = `${member.prefix}_${name}`;
        if (seen.has(prefixed) || routeName(server.members, prefixed)?.member !== member) continue;
        if (method === 'tools/list') {
          if (!allowedByList(member.tools, name)) continue;
          const denied = await services.policy.wouldDeny(server.tenantId, {
            agentId: member.agentId,
            tool: name,
            method: 'tools/call',
            bodyBytes: 0,
            callerKind: ctx.state.caller.kind,
          });
          if (denied) continue;
        }
        seen.add(prefixed);
        merged.push({ ...item, name: prefixed });
      }
    }
    return { [key]: merged };
  }

  /** A member left out of an answer: logged with the server and agent, and counted. */
  function memberLeftOut(
    ctx: Ctx,
    server: McpServer,
    member: McpServerMember,
    method: string,
    signal: AbortSignal,
    reason: unknown,
  ): void {
    const why = signal.aborted ? 'timeout' : reason instanceof MemberError && reason.status ? 'refused' : 'invalid';
    mcpServerMemberFailures.inc({ reason: why });
    deps.log.warn(
      { mcpServer: server.id, agentId: member.agentId, method, reason: why, requestId: ctx.state.requestId },
      'an MCP server member is left out of an answer',
    );
  }

  /** The member whose resource list holds `uri`, asked of every member within the bound. */
  async function memberListing(ctx: Ctx, server: McpServer, session: SessionState, uri: string) {
    const link = linkOf(ctx, server);
    const signal = AbortSignal.timeout(MEMBER_LIST_TIMEOUT_MS);
    const lists = await Promise.allSettled(
      server.members.map((member) => memberList(link, session, member, 'resources/list', signal)),
    );
    const index = lists.findIndex(
      (outcome) =>
        outcome.status === 'fulfilled' &&
        outcome.value.some((entry) => (entry as { uri?: unknown } | null)?.uri === uri),
    );
    return index < 0 ? null : server.members[index];
  }

  /** Relays a request to the member it names, as that member's invocation; its answer as it comes. */
  async function forward(ctx: Ctx, server: McpServer, session: SessionState, member: McpServerMember, rpc: Rpc) {
    const link = linkOf(ctx, server);
    const hangup = new AbortController();
    ctx.req.once('close', () => {
      if (!ctx.res.writableFinished) hangup.abort();
    });
    let reply;
    try {
      reply = await withMemberSession(
        link,
        session,
        member.agentId,
        (sid) => postToMember(link, member.agentId, sid, rpc, hangup.signal),
        hangup.signal,
      );
    } catch (err) {
      if (err instanceof MemberError) return answerRpc(ctx, session, refusalRpc(rpc.id, err));
      throw err;
    }
    if (reply.statusCode !== 200) {
      // What a direct call gets (a refusal of the gateway's, the member's own status), as a JSON-RPC error.
      return answerRpc(ctx, session, refusalRpc(rpc.id, await refusalOf(reply)));
    }
    ctx.status = 200;
    ctx.set('Mcp-Session-Id', session.id);
    for (const name of [
      'content-type',
      'x-gateway-invocation-id',
      'x-gateway-policy-warning',
      'payment-response',
      'x-payment-response',
    ]) {
      const value = reply.headers[name];
      if (typeof value === 'string') ctx.set(name, value);
    }
    ctx.set('Cache-Control', 'no-cache');
    ctx.set('X-Accel-Buffering', 'no');
    ctx.body = reply.body;
  }

  function answerRpc(ctx: Ctx, session: SessionState | null, message: unknown, status = 200): void {
    ctx.status = status;
    if (session) ctx.set('Mcp-Session-Id', session.id);
    ctx.body = message;
  }

  async function post(ctx: Ctx): Promise<void> {
    const { caller } = ctx.state;
    const server = await reads.server(caller.tenantId, ctx.params.id);
    const owner: SessionOwner = { tenantId: caller.tenantId, serverId: server.id, caller: caller.userId };
    const rpc = rpcOf(ctx.request.body);
    if (!rpc) return answerRpc(ctx, null, rpcError(null, -32600, 'the body must be one JSON-RPC 2.0 request'), 400);

    if (isInitializeRequest(rpc)) {
      const session: SessionState = { id: await openSession(deps.orm, owner), members: {} };
      // No member is asked anything yet: each member's session is opened the first time the
      // session needs that member (members.ts withMemberSession).
      const asked = rpc.params.protocolVersion;
      const protocolVersion = SUPPORTED_PROTOCOL_VERSIONS.includes(asked) ? asked : LATEST_PROTOCOL_VERSION;
      return answerRpc(ctx, session, {
        jsonrpc: '2.0',
        id: rpc.id,
        result: {
          protocolVersion,
          capabilities: CAPABILITIES,
          serverInfo: { name: server.name, version: '1' },
          ...(server.description ? { instructions: server.description } : {}),
        },
      });
    }

    const sessionId = ctx.get('mcp-session-id');
    if (!sessionId) return answerRpc(ctx, null, rpcError(rpc.id, -32000, 'Mcp-Session-Id is required'), 400);
    const row = await reads.session(sessionId, owner);
    // An unknown or ended session: the client starts a new one (MCP's streamable HTTP transport).
    if (!row) return answerRpc(ctx, null, rpcError(rpc.id, -32001, 'session not found'), 404);
    const session: SessionState = { id: row.id, members: { ...row.memberSessions } };

    if (rpc.id === undefined) {
      // A notification for the server itself (initialized, cancelled, …): nothing to answer.
      ctx.status = 202;
      ctx.set('Mcp-Session-Id', session.id);
      return;
    }
    if (rpc.method === 'ping') return answerRpc(ctx, session, { jsonrpc: '2.0', id: rpc.id, result: {} });
    if (rpc.method in LISTS) {
      const result = await federatedList(ctx, server, session, rpc.method as ListMethod);
      return answerRpc(ctx, session, { jsonrpc: '2.0', id: rpc.id, result });
    }
    if (rpc.method === 'tools/call' || rpc.method === 'prompts/get') {
      const name = rpc.params?.name;
      const route = typeof name === 'string' ? routeName(server.members, name) : null;
      const allowed = route && (rpc.method !== 'tools/call' || allowedByList(route.member.tools, route.name));
      if (!route || !allowed)
        return answerRpc(
          ctx,
          session,
          rpcError(rpc.id, -32602, `unknown ${rpc.method === 'tools/call' ? 'tool' : 'prompt'}: ${String(name)}`),
        );
      return forward(ctx, server, session, route.member, { ...rpc, params: { ...rpc.params, name: route.name } });
    }
    if (rpc.method === 'resources/read') {
      // A resource goes back to the member that lists it (the first, in member order).
      const uri = rpc.params?.uri;
      const member = typeof uri === 'string' ? await memberListing(ctx, server, session, uri) : null;
      if (!member) return answerRpc(ctx, session, rpcError(rpc.id, -32002, `resource not found: ${String(uri)}`));
      return forward(ctx, server, session, member, rpc);
    }
    return answerRpc(ctx, session, rpcError(rpc.id, -32601, `method not found: ${rpc.method}`));
  }

  /** GET: the session's stream of the server's own messages (streams.ts). */
  async function stream(ctx: Ctx): Promise<void> {
    const { caller } = ctx.state;
    const server = await reads.server(caller.tenantId, ctx.params.id);
    const owner: SessionOwner = { tenantId: caller.tenantId, serverId: server.id, caller: caller.userId };
    const sessionId = ctx.get('mcp-session-id');
    if (!sessionId) return answerRpc(ctx, null, rpcError(null, -32000, 'Mcp-Session-Id is required'), 400);
    if (!(await reads.session(sessionId, owner)))
      return answerRpc(ctx, null, rpcError(null, -32001, 'session not found'), 404);
    await streams.open(ctx, server, owner, sessionId);
  }

  /** DELETE: the session ends; each member session it opened is ended at its member, best effort. */
  async function remove(ctx: Ctx): Promise<void> {
    const { caller } = ctx.state;
    const server = await reads.server(caller.tenantId, ctx.params.id);
    const owner: SessionOwner = { tenantId: caller.tenantId, serverId: server.id, caller: caller.userId };
    const ended = await endSession(deps.orm, deps.feed, ctx.get('mcp-session-id'), owner);
    if (!ended) throw notFound('session not found');
    await Promise.all(
      Object.entries(ended)
        .filter(([, memberSession]) => memberSession !== '')
        .map(([agentId, memberSession]) => closeMemberSession(caller.tenantId, agentId, memberSession)),
    );
    ctx.status = 204;
  }

  /** MCP's DELETE of the member's session, sent to its upstream as its calls are (SSRF guard, credential); best effort. */
  async function closeMemberSession(tenantId: string, agentId: string, memberSession: string): Promise<void> {
    try {
      const agent = await services.agents.load(tenantId, agentId);
      if (!agent?.upstreamUrl) return;
      const credential = await services.credentials.headersFor(tenantId, agent.credentialRef);
      const reply = await services.upstream.open({
        url: agent.upstreamUrl,
        method: 'DELETE',
        headers: { ...credential, 'mcp-session-id': memberSession },
        deadlineMs: MEMBER_CLOSE_TIMEOUT_MS,
        deadlineCoversBody: true,
        resendAllowed: false,
        tenantId,
      });
      await reply.body.dump();
      reply.finish();
    } catch (err) {
      deps.log.info({ agentId, err: (err as Error).name }, 'a member session could not be ended');
    }
  }

  return { post, stream, remove };
}
