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
// price may be the tool's, once the body is parsed, still before policy. A paid call also takes
// its payer's bucket.
import type { Context } from 'koa';
import { notFound } from '../errors.ts';
import { bucketsFor, type Bucket } from '../../gateway/ratelimit/index.ts';
import { ApiError } from '../errors.ts';
import { challengeError, payerOf } from '../payment/stage.ts';
import { offeredPayment, paymentHeadersOf } from '../payment/dialect.ts';
import { clientAddress, publicRequestUrl } from '../public-url.ts';
import { admitAgent, takeTokens, type Door, type GateCtx } from './gate.ts';
import type { Agent } from '../../gateway/db/entities.ts';
import type { AppDeps } from '../deps.ts';
import type { ProxyServices } from './services.ts';

/** A bucket's depth: two seconds of its rate. */
const bucket = (key: string, rate: number): Bucket => ({ key, rate, burst: Math.max(1, Math.ceil(rate * 2)) });

/** The bucket of an unpaid request's client address, over every agent (challenges, pages) or its polls. */
export function clientBucket(ctx: Context, deps: AppDeps, use: 'challenge' | 'poll'): Bucket {
  const limits = deps.config.publicAgents;
  const address = clientAddress(ctx, deps.config.publicAddress);
  return use === 'poll'
    ? bucket(`public-poll:${address}`, limits.pollRpsPerClient)
    : bucket(`public-client:${address}`, limits.challengeRpsPerClient);
}

const tenantBucket = (deps: AppDeps, agent: Pick<Agent, 'tenantId'>) =>
  bucket(`public-tenant:${agent.tenantId}`, deps.config.publicAgents.challengeRpsPerTenant);

/** The public agent the URL names, or 404 (absent, not public, deleted, pending or suspended). */
function admitPublicAgent(ctx: GateCtx, deps: AppDeps, services: Pick<ProxyServices, 'agents'>) {
  return admitAgent(ctx, deps, (id) => services.agents.loadPublic(id), notFound);
}

/**
 * An unpaid request (a challenge, the page): the client's bucket first, so a client scanning
 * ids is refused before it costs reads, then the agent, then its tenant's challenge bucket.
 */
export async function admitUnpaid(ctx: GateCtx, deps: AppDeps, services: Pick<ProxyServices, 'agents' | 'limiter'>) {
  await takeTokens(services.limiter, [clientBucket(ctx, deps, 'challenge')]);
  const admitted = await admitPublicAgent(ctx, deps, services);
  await takeTokens(services.limiter, [tenantBucket(deps, admitted.agent)]);
  return admitted;
}

export function publicDoor(deps: AppDeps, services: Pick<ProxyServices, 'agents' | 'limiter' | 'payment'>): Door {
  return {
    issuesPollKeys: true,
    async admit(ctx) {
      const headers = paymentHeadersOf((name) => ctx.get(name));
      const unpaid = offeredPayment(headers) === 'none';
      const admitted = unpaid ? await admitUnpaid(ctx, deps, services) : await admitPublicAgent(ctx, deps, services);
      const { agent } = admitted;
      const caller = { tenantId: agent.tenantId, userId: '', kind: 'x402' as const };
      if (unpaid && agent.protocol !== 'mcp') {
        const resourceUrl = publicRequestUrl(ctx, deps.config.publicAddress);
        throw challengeError(deps.config.payment, { agent, mcp: null, resourceUrl });
      }
      const giveBack = unpaid
        ? async () => undefined
        : await takeTokens(services.limiter, bucketsFor(agent, deps.config.rateLimit));
      return {
        ...admitted,
        caller,
        giveBack,
        async identify(call) {
          let payer: string | null;
          try {
            payer = await payerOf(deps, services.payment, call, headers);
          } catch (err) {
            // No payment, or one that does not verify: not a paid call, so its call tokens come
            // back and it counts as a challenge instead (a stream of made-up payments is limited
            // per client like unpaid requests; past that, 429).
            if (!unpaid) {
              await giveBack();
              await takeTokens(services.limiter, [clientBucket(ctx, deps, 'challenge'), tenantBucket(deps, agent)]);
            }
            throw err;
          }
          // Every public call is paid: a tool priced 0 has no payer to answer to.
          if (!payer) {
            await giveBack();
            throw new ApiError(403, 'free calls are not served on the public URL');
          }
          call.caller = { tenantId: agent.tenantId, userId: `x402:${payer}`, kind: 'x402' };
          try {
            await takeTokens(services.limiter, [bucket(`public-payer:${payer}`, deps.config.publicAgents.payerRps)]);
          } catch (err) {
            await giveBack();
            throw err;
          }
        },
      };
    },
  };
}
