// Errors are mapped to responses in one place. A handler throws an ApiError with a status
// and a coarse, caller-safe message, the domain a Refusal of a kind (gateway/refusal.ts) that
// is answered here with its status; anything else is a 500 with no body, logged server-side
// by its kind and where it was thrown.
import type { Context, Next } from 'koa';
import type { Logger } from '../lib/log.ts';
import { errorFrames, errorKind } from '../lib/error-kind.ts';
import { ApiError, badRequest } from '../lib/http-error.ts';
import { PaymentAlreadyBound } from '../gateway/payment/binding.ts';
import { JsonRpcRequestError } from '../gateway/jsonrpc/request.ts';
import { Refusal, type RefusalKind } from '../gateway/refusal.ts';
import { PAYMENT_RESPONSE_HEADER } from './payment/x402-headers.ts';

export { ApiError, badRequest, conflict, notFound, unprocessable } from '../lib/http-error.ts';

/** The status of each kind of the domain's refusals. */
const REFUSAL_STATUS: Record<RefusalKind, number> = { invalid: 400, not_found: 404, conflict: 409 };

/** The domain's refusals (and a payment bound elsewhere), as the v1 contract answers them; anything else as it is. */
function asApiError(caught: unknown): unknown {
  if (caught instanceof Refusal) return new ApiError(REFUSAL_STATUS[caught.kind], caught.message);
  if (caught instanceof PaymentAlreadyBound) return new ApiError(402, caught.message);
  return caught;
}

/** What `parse` returns; a JSON-RPC request it refuses (gateway/jsonrpc/request.ts) is a 400 saying why. */
export function parsedOr400<T>(parse: () => T): T {
  try {
    return parse();
  } catch (err) {
    if (err instanceof JsonRpcRequestError) throw badRequest(err.message);
    throw err;
  }
}

/** Body-less statuses per the v1 contract: 401 and 500 carry no body. */
const BODYLESS = new Set([401, 500]);

export function errorMapper(log: Logger) {
  return async function mapErrors(ctx: Context, next: Next): Promise<void> {
    try {
      await next();
    } catch (caught) {
      const err = asApiError(caught);
      if (err instanceof ApiError) {
        // A 402 says the payment bought nothing: whatever set a receipt before the refusal
        // (a settled payment another request then bound), it does not go out with one.
        if (err.status === 402) for (const name of Object.values(PAYMENT_RESPONSE_HEADER)) ctx.remove(name);
        ctx.set(err.headers);
        if (BODYLESS.has(err.status)) return respondEmpty(ctx, err.status);
        ctx.status = err.status;
        ctx.body = err.body ?? { error: err.message };
        return;
      }
      // koa-bodyparser and friends raise http-errors with an `expose` flag and a status.
      const status = (err as { status?: number; expose?: boolean }).status;
      if (typeof status === 'number' && status >= 400 && status < 500) {
        ctx.status = status;
        ctx.body = { error: status === 413 ? 'request body too large' : 'invalid request body' };
        return;
      }
      // Its kind and frames, not its message: a database error quotes the value it refused,
      // which may be something the caller sent (lib/error-kind.ts).
      log.error({ err: errorKind(err), at: errorFrames(err), requestId: ctx.state.requestId }, 'unhandled error');
      respondEmpty(ctx, 500);
    }
  };
}

/** An empty body with this status. Koa turns `body = null` into 204 unless the status is set after it. */
export function respondEmpty(ctx: Context, status: number): void {
  ctx.body = null;
  ctx.status = status;
}
