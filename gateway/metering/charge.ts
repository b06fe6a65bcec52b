// What a metered call costs, from its meter's reading, the maximum the payer signed and how the
// upstream call went. The payer is charged only for an answer it got and never above the
// maximum: a call never forwarded, an upstream that failed (no answer, or a 5xx) or an answer
// without a usable reading costs 0; a larger reading is cut to the maximum and said to be
// (`capped`, for a metric). An answer broken off after it started is charged by what was read
// before the break (an Anthropic stream's input tokens, a header read with the status line),
// said as `interrupted`: the upstream did that work and the caller received part of it. An MCP
// answer saying the paid request failed (gateway/mcp/answer-watch.ts) costs 0 too.
import type { ChargeMeter } from './meter.ts';
import type { MeterReading } from './reader.ts';

export type UpstreamOutcome =
  /** The call never reached its upstream (refused by the gateway, an open breaker, a refused connection). */
  | { kind: 'not_forwarded' }
  /** No answer: a timeout, or a connection reset before the answer's first byte. */
  | { kind: 'failed' }
  /**
   * An answer with this status; `complete` false when its body broke off; `requestFailed` when
   * the answer says the request failed (an MCP JSON-RPC error or a tool result with `isError`).
   */
  | { kind: 'answered'; status: number; complete: boolean; requestFailed?: boolean };

type ChargeReason = 'measured' | 'interrupted' | 'no_reading' | 'upstream_failed' | 'request_failed' | 'not_forwarded';

export type Charge = { charge: bigint; capped: boolean; reason: ChargeReason };

const free = (reason: ChargeReason): Charge => ({ charge: 0n, capped: false, reason });

function measured(reading: MeterReading, meter: ChargeMeter, maximum: bigint): bigint | null {
  if (meter.kind === 'ceiling') return maximum;
  if (reading.kind === 'amount' && meter.kind === 'header') return reading.amount;
  if (reading.kind === 'usage' && meter.kind === 'tokens') {
    const milli =
      BigInt(reading.input) * BigInt(meter.input_per_1k) + BigInt(reading.output) * BigInt(meter.output_per_1k);
    return (milli + 999n) / 1000n;
  }
  return null;
}

export function chargeFor(
  reading: MeterReading,
  meter: ChargeMeter,
  maximum: bigint,
  upstream: UpstreamOutcome,
): Charge {
  if (upstream.kind === 'not_forwarded') return free('not_forwarded');
  if (upstream.kind === 'failed' || upstream.status >= 500) return free('upstream_failed');
  if (upstream.requestFailed) return free('request_failed');
  const amount = measured(reading, meter, maximum);
  if (amount === null) return free('no_reading');
  const ceiling = maximum > 0n ? maximum : 0n;
  const reason = upstream.complete ? 'measured' : 'interrupted';
  return amount > ceiling ? { charge: ceiling, capped: true, reason } : { charge: amount, capped: false, reason };
}
