// The gateway's own metrics (names, labels and what records them: docs/OBSERVABILITY.md),
// defined with lib/observability/metrics.ts's helpers. The API's request-level ones are in
// api/metrics.ts.
import { counter, gauge, histogram } from '../lib/observability/metrics.ts';

const upstreamOutcomes = counter({
  name: 'gateway_upstream_outcomes_total',
  help: 'Completed upstream calls by mode and error class (`none` when the upstream answered below 400)',
  labelNames: ['mode', 'error_class'] as const,
});

const upstreamLatency = histogram({
  name: 'gateway_upstream_latency_seconds',
  help: 'Upstream call latency of completed invocations, by mode',
  labelNames: ['mode'] as const,
  buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
});

// Breakers are per tenant and upstream origin, both chosen by tenants: no label may carry
// either, so the process reports how many breakers are in each state.
const breakerStates = gauge({
  name: 'gateway_circuit_breakers',
  help: 'Circuit breakers of this process (one per tenant and upstream origin), by state',
  labelNames: ['state'] as const,
});
for (const state of ['closed', 'half_open', 'open']) breakerStates.set({ state }, 0);

export const policyDecisions = counter({
  name: 'gateway_policy_decisions_total',
  help: 'Policy evaluations by resulting action and what decided it (rule, default, on_error)',
  labelNames: ['action', 'source'] as const,
});

// The facilitator counts the same metric under service="facilitator" (facilitator/metrics.ts).
export const settlements = counter({
  name: 'settlements_total',
  help: 'Settlements by service (gateway client or facilitator) and outcome',
  labelNames: ['service', 'outcome'] as const,
});

export const receiptsIssued = counter({
  name: 'gateway_receipts_issued_total',
  help: 'Trust receipts signed, by signing key id',
  labelNames: ['kid'] as const,
});

/** A breaker's move between states: from null when created, to null when dropped. */
export function recordBreakerTransition(
  from: 'closed' | 'half_open' | 'open' | null,
  to: 'closed' | 'half_open' | 'open' | null,
): void {
  if (from) breakerStates.dec({ state: from });
  if (to) breakerStates.inc({ state: to });
}

/** One completed upstream call (the worker records transactional ones itself; the streaming route calls this). */
export function recordUpstreamOutcome(
  mode: 'transactional' | 'streaming',
  errorClass: string | null,
  latencyMs: number | null,
): void {
  upstreamOutcomes.inc({ mode, error_class: errorClass ?? 'none' });
  if (latencyMs !== null) upstreamLatency.observe({ mode }, latencyMs / 1000);
}

// Metered (`upto`) calls: by mode and the charge's reason (a fixed set), never by tenant or
// agent, which tenants choose.
const meterReadings = counter({
  name: 'gateway_meter_readings_total',
  help: 'Metered calls completed, by mode and the reason of their charge (measured, interrupted, no_reading, upstream_failed, request_failed, not_forwarded)',
  labelNames: ['mode', 'reason'] as const,
});

const meterReadingsCapped = counter({
  name: 'gateway_meter_readings_capped_total',
  help: 'Metered calls whose reading exceeded the maximum the payer signed and was charged that maximum, by mode',
  labelNames: ['mode'] as const,
});

// Labelled by outcome and reason only (fixed sets), never by tenant, agent or payer.
const meteredCharges = counter({
  name: 'gateway_metered_charges_total',
  help: 'Metered charges settled after their calls, by outcome (settled, nothing_due, failed, unconfigured) and, for a failed one, why (payer_balance_short, payer_allowance_revoked, authorization_used, signed_payment_missing, settlement_refused, settlement_failed, settlement_unavailable; none otherwise)',
  labelNames: ['outcome', 'reason'] as const,
});

/** One metered charge's settlement, once it is no longer due. */
export function recordMeteredCharge(outcome: string, reason: string | null): void {
  meteredCharges.inc({ outcome, reason: reason ?? 'none' });
}

// Labelled by cause only (a fixed set of the scheme's error names), never by tenant or channel.
const channelsQuarantined = counter({
  name: 'gateway_channels_quarantined_total',
  help: 'Batch-settlement channels the claims set aside because their latest voucher cannot be claimed, by cause (invalid_batch_settlement_evm_voucher_signature, _channel_id_mismatch, _token_mismatch, _claim_payload, claim_refused)',
  labelNames: ['cause'] as const,
});

/** Payment channels this API process holds between calls (payment/channels/owners.ts). */
export const channelsHeld = gauge({
  name: 'gateway_channels_held',
  help: 'Batch-settlement payment channels this API process holds between calls (their lease kept, their state in memory)',
});

/** A channel set aside by the claims (channel-claims/claims.ts). */
export function recordChannelQuarantined(cause: string): void {
  channelsQuarantined.inc({ cause });
}

// Labelled by the request's place and the answer (fixed sets), never by tenant or channel.
const channelClaimRequests = counter({
  name: 'gateway_channel_claim_requests_total',
  help: 'Claim requests of batch-settlement channels sent to facilitators, by request (batch: a planned batch; part: a part of a batch the facilitator failed) and outcome (claimed, settlement_failed, settlement_refused, settlement_unavailable)',
  labelNames: ['request', 'outcome'] as const,
});

/** One claim request of the claims (channel-claims/claims.ts) and the facilitator's answer. */
export function recordChannelClaimRequest(request: 'batch' | 'part', outcome: string): void {
  channelClaimRequests.inc({ request, outcome });
}

/** One metered call's charge, as its row records it. */
export function recordMeterReading(mode: 'transactional' | 'streaming', reason: string, capped: boolean): void {
  meterReadings.inc({ mode, reason });
  if (capped) meterReadingsCapped.inc({ mode });
}

/** A virtual MCP server's member that did not answer a federated list (api/mcp-servers/endpoint.ts). */
export const mcpServerMemberFailures = counter({
  name: 'gateway_mcp_server_member_failures_total',
  help: 'Members of virtual MCP servers left out of a federated list, by reason (timeout, refused, invalid)',
  labelNames: ['reason'] as const,
});

/** Open GET streams of virtual MCP servers' sessions on this process (api/mcp-servers/streams.ts). */
export const mcpServerStreams = gauge({
  name: 'gateway_mcp_server_streams',
  help: 'Open server-to-client streams (GET) of virtual MCP server sessions on this process',
});

// The analytics fold (gateway/analytics/fold.ts): how far the rollups are behind the rows, as
// the last round this process saw left them (whichever replica ran it), growing until the next.
let foldSeen: { lagSeconds: number; atMs: number } | null = null;
gauge({
  name: 'gateway_analytics_fold_lag_seconds',
  help: 'Seconds since the snapshot of the last analytics fold round: every invocation change committed before it is in the rollups',
  collect() {
    if (foldSeen) this.set(foldSeen.lagSeconds + (Date.now() - foldSeen.atMs) / 1000);
  },
});

const foldedRows = counter({
  name: 'gateway_analytics_folded_rows_total',
  help: 'Invocation row versions folded into the analytics rollups by the rounds this process ran',
});

/** What a fold round of this process saw: the lag the database reported, and the rows it folded (null: another process's round). */
export function recordFold(lagSeconds: number, rows: number | null): void {
  foldSeen = { lagSeconds, atMs: Date.now() };
  if (rows) foldedRows.inc(rows);
}
// Labelled by budget id: ids are the gateway's own (`bud_<uuidv7>`), and only a budget that
// refuses a call ever appears, so the series are as many as the budgets doing their job.
export const budgetRefusals = counter({
  name: 'gateway_budget_refusals_total',
  help: 'Calls refused by a hard budget (429 budget exceeded), by the budget named in the answer',
  labelNames: ['budget_id'] as const,
});
