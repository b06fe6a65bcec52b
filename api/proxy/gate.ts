// The gate both invoke endpoints pass, at either door (Door: /v1 with a token, or a public
// agent's URL, api/proxy/public-door.ts): (auth, done by the /v1 router) → agent in the caller's
// tenant (404) → invocable (422) → X-Gateway-Model (400) → rate limit (429). Then, once the body
// is known, in the v1 contract's order: parse → policy (403) → payment (402). A call denied
// by policy never reaches the payment stage, so it is never told to pay. The header check
// comes before the rate limit, and a body refused for its size or its parse gives its tokens
// back (refundIfRefused): a call refused for what it sent reaches no upstream and costs its
// tenant's buckets nothing, so a flood of such calls drains no one's budget.
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Context, Next } from 'koa';
import type { Agent } from '../../gateway/db/entities.ts';
import { ApiError, badRequest, notFound, unprocessable } from '../errors.ts';
import { checkTaskBinding } from './a2a.ts';
import { isId } from '../../lib/ids.ts';
import { agentStatus } from '../agents/serialize.ts';
import { requestIdFrom } from '../../gateway/upstream/headers.ts';
import { bucketsFor } from '../../gateway/ratelimit/index.ts';
import { policyStage } from '../policy/stage.ts';
import { paymentStage } from '../payment/stage.ts';
import { paymentHeadersOf } from '../payment/dialect.ts';
import { refuseKnownFailure } from './known-failure.ts';
import type { ProxyCall } from './call.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState, Caller } from '../auth.ts';
import type { Bucket, RateLimiter } from '../../gateway/ratelimit/index.ts';
import type { ProxyServices } from './services.ts';

const MAX_MODEL_BYTES = 256;

export type Admitted = {
  agent: Agent;
  /** Who the call is from. A public call's is completed from its payment by `identify`, before policy. */
  caller: Caller;
  requestId: string;
  model: string | null;
  /** Returns the call's rate-limit tokens; at most once. */
  giveBack(): Promise<void>;
  /** Runs before policy once the call's facts are known: a public call's payer becomes `call.caller` (public-door.ts). */
  identify?(call: ProxyCall): Promise<void>;
  /** Runs once the payment stage accepted the call's payment (public-door.ts: the client's attempt token comes back). */
  settled?(): Promise<void>;
};

/** A proxied call's context, either door: /v1 (the token's caller in state) or a public agent's URL. */
export type GateCtx = Context & { state: Partial<AuthState>; params: Record<string, string> };

/**
 * Where a call comes in: /v1 with a bearer token (tokenDoor), or a public agent's URL, paid by
 * any x402 client (public-door.ts). Both then pass the same stages, record and receipt.
 */
export type Door = {
  admit(ctx: GateCtx): Promise<Admitted>;
  /** The 202 of a transactional call hands out a poll capability (the caller has no token to poll with). */
  issuesPollKeys: boolean;
  /** The door speaks the x402 A2A transport (api/proxy/a2a-x402.ts): the public one. */
  speaksA2aPayments?: boolean;
};

function isInvocable(agent: Agent): boolean {
  return agentStatus(agent) === 'active' && !agent.suspended;
}

// strict: the barrier of each proxied call, sent as the request arrives (syncGateCaches).
const barriers = new WeakMap<IncomingMessage, Promise<void>>();

/**
 * Koa middleware, first in the app. strict: a proxied call's barrier (below) is sent as soon
 * as its request has arrived, so the round trip overlaps auth and routing instead of following
 * them; it is still sent after the call arrived, which is all the guarantee needs. Concurrent
 * calls, and callers that turn out to be unauthenticated, share round trips (ChangeFeed.sync).
 */
export function syncGateCaches(deps: AppDeps) {
  const strict = deps.config.gateFreshness === 'strict';
  return function sendGateBarrier(ctx: Context, next: Next): Promise<void> {
    // A public agent's URLs, any method: the page or challenge of a just-closed agent is a 404 too.
    const gated =
      (ctx.method === 'POST' && ctx.path.startsWith('/v1/proxy/')) || ctx.path.startsWith('/public/agents/');
    if (strict && gated) barriers.set(ctx.req, deps.feed.sync());
    return next();
  };
}

/**
 * The agent's part of admission, both doors: X-Request-ID (set first, so every answer carries
 * it), the agent `find` gives (404 when none), invocable (`closed` when not), X-Gateway-Model.
 */
export async function admitAgent(
  ctx: GateCtx,
  deps: AppDeps,
  find: (id: string) => Promise<Agent | null>,
  closed: () => ApiError,
): Promise<Pick<Admitted, 'agent' | 'requestId' | 'model'>> {
  // acknowledged: nothing to wait for; a change made through the API was applied here before
  // its writer answered (freshness.ts).
  // strict: every agent or policy change committed before this call is applied to this
  // process's caches before they answer it (one round trip on the change feed, shared by
  // concurrent calls, sent as the request arrived): the agent read below and the policy read
  // of the policy stage.
  const fresh = deps.config.gateFreshness === 'strict' ? (barriers.get(ctx.req) ?? deps.feed.sync()) : null;
  const requestId = requestIdFrom(ctx.get('x-request-id') || undefined, randomUUID);
  ctx.set('X-Request-ID', requestId);

  if (!isId('agt', ctx.params.id)) throw notFound();
  if (fresh) await fresh;
  const agent = await find(ctx.params.id);
  if (!agent) throw notFound();
  if (!isInvocable(agent)) throw closed();

  const model = ctx.get('x-gateway-model') || null;
  // Node hands header values over as latin1 text, one character per byte on the wire.
  if (model && Buffer.byteLength(model, 'latin1') > MAX_MODEL_BYTES)
    throw badRequest('X-Gateway-Model exceeds 256 bytes');
  return { agent, requestId, model };
}

/** Takes a token from every bucket (all or nothing; 429 when one is empty); returns the give-back, at most once effective. */
export async function takeTokens(limiter: RateLimiter, buckets: Bucket[]): Promise<() => Promise<void>> {
  const decision = await limiter.take(buckets);
  if (!decision.allowed)
    throw new ApiError(429, 'rate limit exceeded', { 'Retry-After': String(decision.retryAfterSeconds) });
  let given = false;
  return async () => {
    if (given) return;
    given = true;
    await limiter.giveBack(buckets);
  };
}

/** /v1: the token's caller, the agent in its tenant (422 when not invocable), the agent, tenant and global buckets. */
export function tokenDoor(deps: AppDeps, services: Pick<ProxyServices, 'agents' | 'limiter'>): Door {
  return {
    issuesPollKeys: false,
    async admit(ctx) {
      const caller = ctx.state.caller!;
      const admitted = await admitAgent(
        ctx,
        deps,
        (id) => services.agents.load(caller.tenantId, id),
        () => unprocessable('agent is not invocable'),
      );
      const giveBack = await takeTokens(services.limiter, bucketsFor(admitted.agent, deps.config.rateLimit));
      return { ...admitted, caller, giveBack };
    },
  };
}

/**
 * Runs a check of what the caller sent (the body's size: 413, its parse: 400); a call it
 * refuses with `status` gives its rate-limit tokens back before the refusal goes out, but only
 * when `cheap()` says the refusal cost the gateway next to nothing (a declared length over the
 * cap, refused before a byte is read; a small body's parse). Reading 32 MiB or parsing a large
 * body is work every tenant's calls wait behind: those refusals keep their tokens.
 */
export async function refundIfRefused<T>(
  admitted: Pick<Admitted, 'giveBack'>,
  status: 400 | 413,
  check: () => T | Promise<T>,
  cheap: () => boolean,
): Promise<T> {
  try {
    return await check();
  } catch (err) {
    if (err instanceof ApiError && err.status === status && cheap()) await admitted.giveBack();
    throw err;
  }
}

/** A parse refusal of a body this small costs less than the token it gives back. */
const CHEAP_PARSE_BYTES = 64 * 1024;

export function cheapToParse(body: Buffer): boolean {
  return body.length <= CHEAP_PARSE_BYTES;
}

/**
 * The caller's identity (a public call: its payer, else its challenge), policy, then payment. Fills call.policyWarning and call.payment; throws 403 or 402, or for a
 * priced call known to fail without the upstream 502/503 (known-failure.ts).
 * `beforePayment` holds the endpoint's own checks that could still refuse the call: it runs once
 * policy has allowed the call and before any money moves, so a payer is never charged for a
 * call the gateway then refuses.
 */
export async function runStages(
  ctx: Pick<Context, 'get'>,
  deps: AppDeps,
  services: Pick<ProxyServices, 'policy' | 'payment' | 'upstream' | 'a2aTasks'>,
  call: ProxyCall,
  admitted: Pick<Admitted, 'identify' | 'settled'>,
  beforePayment?: () => Promise<void>,
): Promise<void> {
  await admitted.identify?.(call);
  // An A2A call about a task: only the caller side the task is bound to, once it is known.
  await checkTaskBinding(services.a2aTasks, call);
  const policy = await policyStage(services.policy, call);
  if (policy.action === 'deny') throw new ApiError(403, 'denied by policy');
  if (policy.action === 'warn') call.policyWarning = policy.reason;
  // Both endpoints: an upstream call known to fail is not paid for (an open circuit, a blocked address).
  await refuseKnownFailure(deps, services.upstream, call);
  await beforePayment?.();
  call.payment = await paymentStage(
    deps,
    services.payment,
    call,
    paymentHeadersOf((name) => ctx.get(name)),
  );
  if (call.payment) await admitted.settled?.();
}
