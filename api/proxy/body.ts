// Reading a capped request body: raw-body stops at the cap and raises 413 without buffering
// past it (a declared Content-Length over the cap is refused before a byte is read).
import type { IncomingMessage } from 'node:http';
import getRawBody from 'raw-body';
import { ApiError, badRequest } from '../errors.ts';

export const MAX_TRANSACTIONAL_BODY = 32 * 1024 * 1024;

export async function readCappedBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  try {
    return await getRawBody(req, { limit });
  } catch (err) {
    if ((err as { status?: number }).status === 413) throw new ApiError(413, 'request body exceeds 32 MiB');
    throw badRequest('could not read request body');
  }
}
