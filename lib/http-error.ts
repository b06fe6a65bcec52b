// The error a handler or a domain step throws for an answer the caller may see: a status and a
// coarse, caller-safe message (api/errors.ts maps it to the response; anything else is a 500).
export class ApiError extends Error {
  readonly status: number;
  readonly headers: Record<string, string>;
  /**
   * A body other than `{error: message}`, for the answers that need it: the x402 challenge, the
   * payment transports' JSON-RPC answers (a string: an SSE answer, its Content-Type in `headers`).
   */
  readonly body: Record<string, unknown> | string | undefined;
  constructor(
    status: number,
    message: string,
    headers: Record<string, string> = {},
    body?: Record<string, unknown> | string,
  ) {
    super(message);
    this.status = status;
    this.headers = headers;
    this.body = body;
  }
}

export const badRequest = (message: string) => new ApiError(400, message);
export const notFound = (what = 'not found') => new ApiError(404, what);
export const conflict = (message: string) => new ApiError(409, message);
export const unprocessable = (message: string) => new ApiError(422, message);
