// The poll capability of a public transactional call (docs/API.md "Selling an agent to any x402
// client", "Polling"): a random key, only its SHA-256 stored on the invocation. A payer that
// resends its payment under the same payment identifier gets the first call back (identifier.ts)
// with a new poll URL: the resend proves it holds that signed authorization, and the 202 that
// carried the first URL may be what it lost. The new key replaces the old one.
import { createHash, randomBytes } from 'node:crypto';
import type { Context } from 'koa';
import { ApiError } from '../errors.ts';
import { earlierInvocationOf } from '../payment/stage.ts';
import { publicBaseUrl } from '../public-url.ts';
import { replacePollKey } from '../../gateway/invocations/reads.ts';
import type { AppDeps } from '../deps.ts';

export function newPollKey(): { key: string; sha256: string } {
  const key = randomBytes(16).toString('base64url');
  return { key, sha256: createHash('sha256').update(key).digest('hex') };
}

export function pollUrl(ctx: Context, deps: AppDeps, invocationId: string, key: string): string {
  return `${publicBaseUrl(ctx, deps.config.publicAddress)}/public/invocations/${invocationId}?key=${key}`;
}

/**
 * `err`, or for the answer to an identified resend of a public call by the same payer, that
 * answer with a poll URL under a new key (the invocation's stored hash replaced).
 */
export async function withNewPollUrl(ctx: Context, deps: AppDeps, caller: string, err: unknown): Promise<unknown> {
  const invocationId = earlierInvocationOf(err);
  if (!invocationId || !(err instanceof ApiError)) return err;
  const poll = newPollKey();
  if (!(await replacePollKey(deps.orm, invocationId, caller, poll.sha256))) return err;
  const body = { ...(err.body as Record<string, unknown>), poll_url: pollUrl(ctx, deps, invocationId, poll.key) };
  return new ApiError(err.status, err.message, err.headers, body);
}
