// /public: public agents, outside /v1 and without a token (docs/API.md "Selling an agent to any
// x402 client"). The calls go through the same endpoints as /v1 (api/invoke/transactional.ts,
// api/invoke/streaming.ts) at the public door (api/admission/public-door.ts); a transactional call is polled with the capability
// its 202 handed out. A browser gets a static page saying what the agent is and how to pay.
import { createHash, timingSafeEqual } from 'node:crypto';
import Router from '@koa/router';
import { formatUnits } from 'ethers';
import type { Agent } from '../../gateway/db/entities.ts';
import { publicInvocation } from '../../gateway/invocations/reads.ts';
import { isId } from '../../lib/ids.ts';
import { notFound } from '../errors.ts';
import { challengeError } from '../payment/stage.ts';
import { serializeInvocation } from '../proxy/serialize.ts';
import { streamRoute } from '../invoke/streaming.ts';
import { takeTokens } from '../admission/stages/rate-limit.ts';
import { admitUnpaid, clientBucket, publicDoor } from '../admission/public-door.ts';
import { publicBaseUrl, publicRequestUrl } from '../public-url.ts';
import { transactionalRoute } from '../invoke/transactional.ts';
import { publicAgentUrls } from '../agents/serialize.ts';
import { servedCard } from '../../gateway/a2a/card.ts';
import type { ProxyParts } from '../proxy/pipeline-parts.ts';
import type { AppDeps } from '../deps.ts';

/** USDC has 6 decimals. */
const USDC_DECIMALS = 6;

// No script, no style, no frame, no form, nothing loaded: the page is text.
const PAGE_CSP = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const escapeHtml = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] ?? c);

/** The page: the agent's name, public description and price, its URLs, and how to pay. Agent text is escaped. */
function agentPage(agent: Agent, base: string): string {
  const urls = publicAgentUrls(base, agent.id);
  const price = formatUnits(agent.pricing!.amount, USDC_DECIMALS);
  const tools = Object.entries(agent.pricing!.tools ?? {}).map(
    ([tool, amount]) => `<li>${escapeHtml(tool)}: ${escapeHtml(formatUnits(amount, USDC_DECIMALS))} USDC</li>`,
  );
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(agent.name)}</title></head>
<body>
<h1>${escapeHtml(agent.name)}</h1>
<p>${escapeHtml(agent.publicDescription ?? '')}</p>
<p>Price: ${escapeHtml(price)} USDC on Base per call${agent.protocol === 'mcp' ? ' (an MCP server over streamable HTTP)' : ''}.</p>
${tools.length ? `<ul>${tools.join('')}</ul>` : ''}
<p>Pay per call with x402, no account: POST to <code>${escapeHtml(urls.transactional)}</code> (answered 202 with a poll URL)
or <code>${escapeHtml(urls.stream)}</code> (answered as it streams). A call without payment is answered 402 with the terms;
an x402 client (x402-fetch, @x402/fetch) signs the USDC authorization and sends it again in X-PAYMENT or PAYMENT-SIGNATURE.</p>
</body></html>
`;
}

export function publicRoutes(deps: AppDeps, services: ProxyParts): Router {
  const router = new Router({ prefix: '/public' });
  const door = publicDoor(deps, services);

  // The page and the challenge differ by Accept, and a call's answer or its poll is the payer's
  // alone: no shared cache may keep or mix them.
  router.use(async (ctx, next) => {
    ctx.set('Vary', 'Accept');
    ctx.set('Cache-Control', 'no-store');
    await next();
  });

  router.post('/agents/:id', transactionalRoute(deps, services, door));
  router.post('/agents/:id/stream', streamRoute(deps, services, door));

  // A browser gets the page; any other client the challenge (with the flat price). Both unpaid.
  router.get('/agents/:id', async (ctx) => {
    const { agent } = await admitUnpaid(ctx, deps, services);
    if (ctx.accepts('application/json', 'text/html') === 'text/html') {
      ctx.set('Content-Security-Policy', PAGE_CSP);
      ctx.set('X-Content-Type-Options', 'nosniff');
      ctx.set('Referrer-Policy', 'no-referrer');
      ctx.type = 'text/html; charset=utf-8';
      ctx.body = agentPage(agent, publicBaseUrl(ctx, deps.config.publicAddress));
      return;
    }
    const resourceUrl = publicRequestUrl(ctx, deps.config.publicAddress);
    throw await challengeError(deps, services.payment, { agent, mcp: null, resourceUrl });
  });

  // A public A2A agent's card, unpaid like the page: its interfaces at the public streaming URL,
  // no security scheme, the x402 A2A extension declared (gateway/a2a/card.ts servedCard).
  router.get('/agents/:id/.well-known/agent-card.json', async (ctx) => {
    const { agent } = await admitUnpaid(ctx, deps, services);
    if (agent.protocol !== 'a2a' || !agent.a2aCard || !agent.upstreamUrl) throw notFound();
    const { stream } = publicAgentUrls(publicBaseUrl(ctx, deps.config.publicAddress), agent.id);
    ctx.body = servedCard(agent.a2aCard, agent.upstreamUrl, stream, { kind: 'x402' });
  });

  // The payer's poll: the key its 202 handed out, compared by hash; anything else is 404.
  router.get('/invocations/:invId', async (ctx) => {
    // Unauthenticated reads: limited per client address before the database is asked.
    await takeTokens(services.limiter, [clientBucket(ctx, deps, 'poll')]);
    const key = typeof ctx.query.key === 'string' ? ctx.query.key : '';
    if (!isId('inv', ctx.params.invId) || !/^[A-Za-z0-9_-]{22}$/.test(key)) throw notFound();
    const row = await publicInvocation(deps.orm, ctx.params.invId);
    const given = createHash('sha256').update(key).digest();
    if (!row?.pollKeySha256 || !timingSafeEqual(Buffer.from(row.pollKeySha256, 'hex'), given)) throw notFound();
    let responseBody: Buffer | null = null;
    if (row.responseBodyId && (row.status === 'succeeded' || row.status === 'failed'))
      responseBody = (await services.bodies.get(row.tenantId, row.responseBodyId))?.content ?? null;
    ctx.body = serializeInvocation(row, responseBody);
  });

  return router;
}
