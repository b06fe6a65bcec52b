// Answers of the management and analytics API are compressed when the caller accepts it
// (gzip or brotli, brotli preferred; `koa-compress`): a month of hourly analytics is megabytes of
// JSON. A proxied answer never is: an invoke's answer (`/v1/proxy/...`, whatever the invoke fast path
// left to the router) and a public agent's (`/public/...`) pass as the upstream sent them, neither
// compressed nor decompressed, whatever the caller accepts. Answers under 1 KiB go as they are.
import type { Context, Next } from 'koa';
import compress from 'koa-compress';

/** Paths whose answers are the gateway's own: the `/v1` API less the proxied calls. */
function ownAnswer(path: string): boolean {
  const lower = path.toLowerCase();
  // A virtual MCP server's endpoint relays its members' answers as they come (api/mcp-servers/).
  return (
    path.startsWith('/v1/') &&
    !lower.startsWith('/v1/proxy/') &&
    !(lower.startsWith('/v1/mcp-servers/') && lower.endsWith('/mcp'))
  );
}

export function compressOwnAnswers() {
  const compressing = compress({ threshold: 1024, gzip: {}, br: {}, deflate: false, zstd: false });
  return function compressAnswers(ctx: Context, next: Next): Promise<void> {
    return ownAnswer(ctx.path) ? compressing(ctx, next) : next();
  };
}
