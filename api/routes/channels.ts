// GET /v1/channels: the tenant's batch-settlement channels, `{data, next_cursor}` in channel id
// order (limit 1–100, default 20, clamped; cursor: the previous page's next_cursor); GET
// /v1/channels/{id}: one of them, 404 for any other tenant's (gateway/payment/channel-claims/reads.ts).
import Router from '@koa/router';
import { channelsPage, ownedChannel } from '../../gateway/payment/channel-claims/reads.ts';
import { clampLimit } from '../pagination.ts';
import { parseQuery } from '../validation.ts';
import { ChannelListQuery } from '../channels/schema.ts';
import type { AppDeps } from '../deps.ts';
import type { AuthState } from '../auth.ts';

export function channelRoutes(deps: AppDeps): Router<AuthState> {
  const router = new Router<AuthState>();

  router.get('/channels', async (ctx) => {
    const query = parseQuery(ChannelListQuery, ctx.query);
    ctx.body = await channelsPage(deps.orm, ctx.state.caller.tenantId, {
      limit: clampLimit(query.limit),
      after: query.cursor?.toLowerCase(),
    });
  });

  router.get('/channels/:id', async (ctx) => {
    ctx.body = await ownedChannel(deps.orm, ctx.state.caller.tenantId, ctx.params.id);
  });

  return router;
}
