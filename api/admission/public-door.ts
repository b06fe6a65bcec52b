// The public door (docs/API.md "Selling an agent to any x402 client"): a public agent's URLs,
// no token, paid per call by any x402 client. The agent comes from the gate's cache whatever its
// tenant, and only while public and invocable: anything else is a 404 that says nothing about
// it. The caller is the payer (`x402:<checksummed address>`), known before policy from the
// verified payment, and the call then passes the /v1 stages unchanged.
// An unpaid call is a challenge: it takes no token from the agent's, tenant's or global buckets
// (they are for calls that are paid), but from the challenge buckets, per client address over
// every agent and per tenant over its public agents, so a flood at one tenant's agent throttles
// neither another tenant's challenges nor anyone's paid calls. It writes nothing and calls no
// upstream: an http agent's challenge goes out before the body is read; an MCP agent's, whose
// price may be the tool's, once the body is parsed, still before policy. Every request takes
// its client's bucket before the agent is read; one offering a payment header has it checked
// (no database) before any call token or body byte when its price does not depend on the body.
// A paid call, in a header or in `_meta`, takes the agent's, tenant's, global and payer buckets.
// An MCP agent's tools/call without an acceptable payment is answered in the x402 MCP transport's
// style (a JSON-RPC result with `isError: true` and the PaymentRequired), not with HTTP 402; an
// A2A message sent with the x402 A2A extension in that transport's (an input-required task), its
// message kept for the paying one only once the challenge buckets admitted it.
import type { Context } from 'koa';
import { notFound } from '../errors.ts';
import { bucketsFor, type Bucket } from '../../gateway/ratelimit/index.ts';
import { ApiError } from '../errors.ts';
import { challengeEntriesOf, challengeError, payerOf, precheckOffer } from '../payment/stage.ts';
import { A2aPaymentAskedAgain, a2aPaymentDeclined, a2aPaymentRequired } from '../payment/a2a-transport.ts';
import { isCharged } from '../../gateway/payment/pricing.ts';
import { offeredPayment } from '../../gateway/payment/dialect.ts';
import { paymentHeadersOf } from '../payment/x402-headers.ts';
import { clientAddress, publicRequestUrl } from '../public-url.ts';
import { admitAgent } from './stages/agent.ts';
import { takeTokens } from './stages/rate-limit.ts';
import type { CallCtx, Door } from './door.ts';
import type { Agent } from '../../gateway/db/entities.ts';
import type { AppDeps } from '../deps.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';

/** A bucket's depth: two seconds of its rate. */
export const bucket = (key: string, rate: number): Bucket => ({ key, rate, burst: Math.max(1, Math.ceil(rate * 2)) });

/**
 * The bucket of a request's client address, over every agent: an unpaid request's (challenges,
 * pages), a request offering a payment in its headers (`paid`, more generous), or a poll's.
 */
export function clientBucket(ctx: Context, deps: AppDeps, use: 'challenge' | 'paid' | 'poll'): Bucket {
  const limits = deps.config.publicAgents;
  const address = clientAddress(ctx, deps.config.publicAddress);
  if (use === 'poll') return bucket(`public-poll:${address}`, limits.pollRpsPerClient);
  if (use === 'paid') return bucket(`public-paid-client:${address}`, limits.rpsPerClient);
  return bucket(`public-client:${address}`, limits.challengeRpsPerClient);
}

const tenantBucket = (deps: AppDeps, agent: Pick<Agent, 'tenantId'>) =>
  bucket(`public-tenant:${agent.tenantId}`, deps.config.publicAgents.challengeRpsPerTenant);

const challengeBuckets = (ctx: Context, deps: AppDeps, agent: Pick<Agent, 'tenantId'>) => [
  clientBucket(ctx, deps, 'challenge'),
  tenantBucket(deps, agent),
];

/** The public agent the URL names, or 404 (absent, not public, deleted, pending or suspended). */
function admitPublicAgent(ctx: CallCtx, deps: AppDeps, services: Pick<ProxyParts, 'agents'>) {
  return admitAgent(ctx, deps, (id) => services.agents.loadPublic(id), notFound);
}

/**
 * An unpaid request (a challenge, the page): the client's bucket first, so a client scanning
 * ids is refused before it costs reads, then the agent, then its tenant's challenge bucket.
 * Returns the give-back of both tokens with the agent.
 */
export async function admitUnpaid(ctx: CallCtx, deps: AppDeps, services: Pick<ProxyParts, 'agents' | 'limiter'>) {
  const client = await takeTokens(services.limiter, [clientBucket(ctx, deps, 'challenge')]);
  const admitted = await admitPublicAgent(ctx, deps, services);
  const tenant = await takeTokens(services.limiter, [tenantBucket(deps, admitted.agent)]);
  return { ...admitted, giveBackChallenge: { client, tenant } };
}

/**
 * The price of an MCP agent with per-tool prices is the tool's, of an A2A agent the method's or
 * skill's (and free for a free method): known once the body is parsed.
 */
const priceKnownBeforeBody = (agent: Agent) =>
  agent.protocol === 'http' || (agent.protocol === 'mcp' && !agent.pricing?.tools);

export function publicDoor(
  deps: AppDeps,
  services: Pick<ProxyParts, 'agents' | 'limiter' | 'payment' | 'a2aPaymentTasks'>,
): Door {
  return {
    issuesPollKeys: true,
    speaksA2aPayments: true,
    async admit(ctx) {
      const headers = paymentHeadersOf((name) => ctx.get(name));
      const unpaid = offeredPayment(headers) === 'none';
      const resourceUrl = publicRequestUrl(ctx, deps.config.publicAddress);
      let challenge: { client: () => Promise<void>; tenant: () => Promise<void> } | null = null;
      let admitted;
      if (unpaid) {
        const { giveBackChallenge, ...rest } = await admitUnpaid(ctx, deps, services);
        admitted = rest;
        challenge = giveBackChallenge;
      } else {
        // Every request is limited per client before the agent read, a paid one too.
        await takeTokens(services.limiter, [clientBucket(ctx, deps, 'paid')]);
        admitted = await admitPublicAgent(ctx, deps, services);
      }
      const { agent } = admitted;
      const caller = { tenantId: agent.tenantId, userId: '', kind: 'x402' as const };
      if (unpaid && agent.protocol === 'http')
        throw await challengeError(deps, services.payment, { agent, mcp: null, resourceUrl });
      if (!unpaid && priceKnownBeforeBody(agent)) {
        // A header payment that does not verify costs no call token and no body read: a 402
        // charged to the challenge buckets (a stream of made-up payments is limited per client).
        try {
          await precheckOffer(
            deps,
            services.payment,
            { agent, resourceUrl, requestId: admitted.requestId, caller },
            headers,
          );
        } catch (err) {
          await takeTokens(services.limiter, challengeBuckets(ctx, deps, agent));
          throw err;
        }
      }
      // The call's tokens: the agent's, tenant's and global buckets once a payment is offered in
      // the headers; an MCP call paid in `_meta` swaps its challenge tokens for them in identify.
      let release = unpaid
        ? async () => undefined
        : await takeTokens(services.limiter, bucketsFor(agent, deps.config.rateLimit));
      const giveBack = () => release();
      let unsettled: () => Promise<void> = async () => undefined;
      /** The x402 A2A transport's payment task a paying message used: gone once its payment is accepted. */
      let paidTask: string | null = null;
      /** The payment task this call's payment took, and by which payment. */
      let taken: { taskId: string; paidBy: string } | null = null;
      return {
        ...admitted,
        caller,
        giveBack,
        async identify(call) {
          // A public MCP agent is paid the way the x402 MCP transport says: an unpaid or refused
          // tools/call is answered as a JSON-RPC tool result (api/proxy/mcp.ts).
          if (agent.protocol === 'mcp') call.paymentAnswer = 'mcp';
          // A message sent with the x402 A2A extension: told to pay with an input-required task
          // (its message kept for the paying one), refused with a failed task
          // (api/payment/a2a-transport.ts). Unpaid, it already took its challenge tokens.
          const x402 = call.a2a?.x402;
          if (x402) {
            call.paymentAnswer = 'a2a';
            paidTask = x402.paymentTaskId;
            const unpaidHere = !x402.paid && offeredPayment(headers) === 'none';
            if (unpaidHere && x402.paymentTaskId && x402.status === 'payment-rejected')
              throw await a2aPaymentDeclined(services.a2aPaymentTasks, call);
            if (unpaidHere && isCharged(call.price))
              throw await a2aPaymentRequired(
                deps.config.payment,
                services.a2aPaymentTasks,
                call,
                await challengeEntriesOf(deps, services.payment, call),
                clientAddress(ctx, deps.config.publicAddress),
              );
          }
          let verified: Awaited<ReturnType<typeof payerOf>>;
          try {
            verified = await payerOf(deps, services.payment, call, headers);
          } catch (err) {
            // No payment, or one that does not verify: not a paid call, so its call tokens come
            // back and it counts as a challenge instead (a stream of made-up payments is limited
            // per client like unpaid requests; past that, 429).
            if (!unpaid) {
              await giveBack();
              await takeTokens(services.limiter, challengeBuckets(ctx, deps, agent));
            }
            throw err;
          }
          // Every public call is paid: a tool priced 0 has no payer to answer to.
          if (!verified) {
            await giveBack();
            throw new ApiError(403, 'free calls are not served on the public URL');
          }
          const { payer } = verified;
          call.caller = { tenantId: agent.tenantId, userId: `x402:${payer}`, kind: 'x402' };
          const payerBucket = bucket(`public-payer:${payer}`, deps.config.publicAgents.payerRps);
          if (challenge) {
            // Paid in `_meta`: a paid call after all, so it takes what a header-paid call takes;
            // its client's challenge token stays taken until the payment settles (below).
            await challenge.tenant();
            release = await takeTokens(services.limiter, [...bucketsFor(agent, deps.config.rateLimit), payerBucket]);
            unsettled = challenge.client;
          } else {
            try {
              await takeTokens(services.limiter, [payerBucket]);
              // A correctly signed authorization from an unfunded key verifies, and costs a claim
              // write and a settle: until its payment settles, a paid attempt also holds a token of
              // its client's challenge bucket, so a flood of them is limited per client like challenges.
              unsettled = await takeTokens(services.limiter, [clientBucket(ctx, deps, 'challenge')]);
            } catch (err) {
              await giveBack();
              throw err;
            }
          }
          // A payment task pays for one run: the paying message whose payment verified takes it
          // for that payment before anything settles, so another payment sent for it is a 404 and
          // is never charged, while the same payment sent again (told its settlement is not known
          // yet: 503, retry the same message) still finds it and resumes.
          const paidBy = `${payer}:${verified.nonce}`;
          if (paidTask && !(await services.a2aPaymentTasks.take(agent.id, paidTask, paidBy))) {
            await giveBack();
            await unsettled();
            throw new ApiError(404, 'payment task not found through this agent');
          }
          if (paidTask) taken = { taskId: paidTask, paidBy };
        },
        settled: () => unsettled(),
        async refused(call, err) {
          // A corrective refusal of a message paid through the x402 A2A transport: the payment is
          // asked again on a new payment task keeping the message (the one it named was taken).
          if (!(err instanceof A2aPaymentAskedAgain)) return err;
          const client = clientAddress(ctx, deps.config.publicAddress);
          return a2aPaymentRequired(deps.config.payment, services.a2aPaymentTasks, call, err.entries, client, {
            refusal: err,
            taken,
          });
        },
      };
    },
  };
}
