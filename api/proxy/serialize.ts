// The Invocation as the poll endpoint shows it (docs/API.md "Invocations").
import type { z } from 'zod';
import type { Invocation } from '../../gateway/db/entities.ts';
import type { InvocationView } from './schema.ts';

/** Typed by the schema the document declares: a field it does not declare does not compile. */
export function serializeInvocation(row: Invocation, responseBody?: Buffer | null): z.infer<typeof InvocationView> {
  const out: z.infer<typeof InvocationView> = {
    invocation_id: row.id,
    agent_id: row.agentId,
    status: row.status,
    created_at: row.createdAt.toISOString(),
    updated_at: row.updatedAt.toISOString(),
    completed_at: row.completedAt ? row.completedAt.toISOString() : null,
    upstream_status: row.upstreamStatus ?? null,
    latency_ms: row.latencyMs ?? null,
    ttft_ms: row.ttftMs ?? null,
    error_class: row.errorClass ?? null,
    mode: row.mode,
    model: row.model ?? null,
    request_id: row.requestId,
    caller_kind: row.callerKind,
    mcp_method: row.mcpMethod ?? null,
    mcp_tool: row.mcpTool ?? null,
    mcp_server_id: row.mcpServerId ?? null,
    a2a_method: row.a2aMethod ?? null,
    a2a_skill: row.a2aSkill ?? null,
    a2a_task_id: row.a2aTaskId ?? null,
    a2a_context_id: row.a2aContextId ?? null,
    payment_network: row.paymentNetwork ?? null,
    payment_asset: row.paymentAsset ?? null,
    payment_amount: row.paymentAmount ?? null,
    payment_payer: row.paymentPayer ?? null,
    payment_nonce: row.paymentNonce ?? null,
    payment_transaction: row.paymentTransaction ?? null,
    payment_scheme: row.paymentScheme ?? null,
    payment_max_amount: row.paymentMaxAmount ?? null,
    payment_charge: row.paymentCharge ?? null,
    payment_settlement: row.paymentSettlement ?? null,
    payment_settle_error: row.paymentSettleError ?? null,
    payment_channel: row.paymentChannel ?? null,
  };
  if (responseBody) out.response_body_b64 = responseBody.toString('base64');
  return out;
}
