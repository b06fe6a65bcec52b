// The parse stage: an MCP or A2A agent's body is one JSON-RPC request, parsed for the facts the
// later stages read (tool, method, skill, tasks; api/proxy/mcp.ts, api/proxy/a2a-x402.ts). A
// request it refuses is a 400, its tokens back when the body was small. A payment in `_meta` or
// in A2A message metadata is never forwarded: the body to send up is then another one.
import type { Readable } from 'node:stream';
import { parseMcpBody } from '../../proxy/mcp.ts';
import { meterOf } from '../../../gateway/invocations/metered.ts';
import { parseA2aRequest } from '../../proxy/a2a-x402.ts';
import { cheapToParse, refundIfRefused } from '../refund.ts';
import type { A2aCall, ProxyCall } from '../../proxy/call.ts';
import type { McpCall } from '../../../gateway/mcp/request.ts';
import type { Admitted, CallCtx, Door } from '../door.ts';
import type { ProxyParts } from '../../proxy/pipeline-parts.ts';

export type Parsed = {
  mcp: McpCall | null;
  a2a: A2aCall | null;
  /** The body to send up when it is not the one received (payment keys out, or the kept message a paying one pays for). */
  forwardBody: Buffer | null;
};

const UNPARSED: Parsed = { mcp: null, a2a: null, forwardBody: null };

export async function parseBody(
  ctx: CallCtx,
  parts: Pick<ProxyParts, 'a2aPaymentTasks'>,
  door: Door,
  admitted: Admitted,
  mode: ProxyCall['mode'],
  received: Buffer | Readable,
): Promise<Parsed> {
  const { agent } = admitted;
  // An MCP or A2A body was read by the body stage: the bytes.
  if (agent.protocol === 'http' || !Buffer.isBuffer(received)) return UNPARSED;
  const body = received;
  if (agent.protocol === 'a2a') {
    const tasks = door.speaksA2aPayments ? parts.a2aPaymentTasks : null;
    const parsed = await refundIfRefused(
      admitted,
      400,
      () => parseA2aRequest(ctx, body, agent, mode, tasks),
      () => cheapToParse(body),
    );
    return { mcp: null, a2a: parsed.a2a, forwardBody: parsed.forwardBody };
  }
  const mcp = await refundIfRefused(
    admitted,
    400,
    // An agent that charges after the answer sends its requests up under an id of the gateway's own.
    () => parseMcpBody(body, meterOf(agent.pricing) !== null),
    () => cheapToParse(body),
  );
  return { mcp, a2a: null, forwardBody: mcp.forwardBody ?? null };
}
