// The agent stage, both doors: X-Request-ID (set first, so every answer carries it), the agent
// the door's `find` gives (404 when none), invocable (the door's `closed` when not: 422 on /v1,
// 404 on the public door), X-Gateway-Model (400).
import { randomUUID } from 'node:crypto';
import type { Agent } from '../../../gateway/db/entities.ts';
import { isInvocable } from '../../../gateway/agents/status.ts';
import { requestIdFrom } from '../../../gateway/upstream/headers.ts';
import { isId } from '../../../lib/ids.ts';
import { badRequest, notFound, type ApiError } from '../../errors.ts';
import { cacheBarrier } from '../freshness-barrier.ts';
import type { Admitted, CallCtx } from '../door.ts';
import type { AppDeps } from '../../deps.ts';

const MAX_MODEL_BYTES = 256;

export async function admitAgent(
  ctx: CallCtx,
  deps: AppDeps,
  find: (id: string) => Promise<Agent | null>,
  closed: () => ApiError,
): Promise<Pick<Admitted, 'agent' | 'requestId' | 'model'>> {
  const fresh = cacheBarrier(ctx, deps);
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
