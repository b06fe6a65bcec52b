// A metered (x402 `upto`) call's record: its scheme and the maximum the payer signed, set when
// the call is admitted, and, when it completes, what its meter read (gateway/metering/) and the
// charge that comes to, written by the completing statement of either mode (store.ts,
// stream-records.ts); a running stream's charge so far, for a process that dies mid-stream.
// Recorded only: gateway/payment/charges.ts settles the charge.
import type { Pricing, RecordedReading } from '../db/entities.ts';
import type { ChargeMeter } from '../metering/meter.ts';
import { createMeterReader, DEFAULT_METER_MAX_BYTES, type MeterReader, type MeterReading } from '../metering/reader.ts';
import { chargeFor, type UpstreamOutcome } from '../metering/charge.ts';
import { watchAnswer } from '../mcp/answer-watch.ts';
import { withOwnId, type IdSpan, type OwnIdRequest } from '../jsonrpc/own-id.ts';
import { recordMeterReading } from '../metrics.ts';
import { SCHEME_UPTO as UPTO } from '../../x402/schemes/upto/schemas.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../../x402/schemes/batch-settlement/schemas.ts';

/** A batch-settlement agent without a meter: an answered call costs its ceiling. */
const CEILING: ChargeMeter = { kind: 'ceiling' };

/**
 * What charges the agent's calls after their answer: the meter of `upto` (with a meter) and of
 * `batch-settlement` (its meter, else the ceiling); null for a call paid before it (`exact`).
 */
export function meterOf(pricing: Pricing | null | undefined): ChargeMeter | null {
  if (pricing?.scheme === UPTO) return pricing.meter ?? null;
  if (pricing?.scheme === SCHEME_BATCH_SETTLEMENT) return pricing.meter ?? CEILING;
  return null;
}

/**
 * The admitted call's fields: scheme and maximum when metered, null otherwise. A call its price
 * makes free (an MCP tool priced 0) is not metered: nobody pays for it.
 */
export function meteredCallFields(
  pricing: Pricing | null | undefined,
  maximum: string | null | undefined,
): { paymentScheme: string | null; paymentMaxAmount: string | null } {
  const metered = meterOf(pricing) !== null && !!maximum && BigInt(maximum) !== 0n;
  return { paymentScheme: metered ? pricing!.scheme! : null, paymentMaxAmount: metered ? maximum : null };
}

/** What a metered call's completion writes. */
export type MeteredCompletion = { paymentCharge: string; meterReading: RecordedReading };

export type MeteredCall = {
  /** Fed the answer's headers and body chunks as they pass. */
  reader: MeterReader;
  /** Ends the reading (call once, after the body ended or broke off) and says the charge. */
  complete(outcome: UpstreamOutcome): MeteredCompletion;
  /**
   * While an answer with `status` streams: every PARTIAL_EVERY_MS, what was read so far, when it
   * changed, handed to the call's `persist` (none: nothing). `stop` when the answer ends.
   */
  track(status: number): { stop(): void };
};

/** How often a streaming metered call's measure so far is written, when it changed. */
const PARTIAL_EVERY_MS = 1_000;

/** The reading as JSON holds it (an amount is a uint256: its decimal text). */
function recorded(reading: MeterReading, capped: boolean, reason: string): RecordedReading {
  const measured = reading.kind === 'amount' ? { kind: 'amount' as const, amount: String(reading.amount) } : reading;
  return { ...measured, capped, reason };
}

/**
 * A metered call's MCP request (`mcpBody`; `span`: where its id lies, if found already) as it goes
 * up: under the gateway's own JSON-RPC id (gateway/jsonrpc/own-id.ts), since which response
 * answers it decides its charge. Null for a call not metered (`meterOf`, its maximum) and for a
 * request with no single id (a notification; one naming it twice was refused at admission).
 */
export function meteredRequestUnderOwnId(
  meter: ChargeMeter | null,
  maximum: string | null,
  mcpBody: Buffer | null,
  span?: IdSpan | null,
): OwnIdRequest | null {
  if (!meter || maximum === null || !mcpBody) return null;
  try {
    return withOwnId(mcpBody, span);
  } catch {
    return null;
  }
}

/**
 * The metering of one call of a metered agent, or null when the call is not metered (no meter,
 * or no maximum recorded). The reader holds at most DEFAULT_METER_MAX_BYTES. An MCP request's
 * (`mcpRequestId`, its JSON-RPC id) answer is watched as well: one saying the request failed
 * costs nothing (gateway/mcp/answer-watch.ts).
 */
export function meteredCall(
  meter: ChargeMeter | null,
  maximum: string | null,
  mode: 'transactional' | 'streaming',
  persist?: (measured: MeteredCompletion) => Promise<void>,
  mcpRequestId?: string | number,
): MeteredCall | null {
  if (!meter || maximum === null) return null;
  const meterReader = createMeterReader(meter, { maxBytes: DEFAULT_METER_MAX_BYTES });
  const watch = mcpRequestId === undefined ? null : watchAnswer(mcpRequestId, DEFAULT_METER_MAX_BYTES);
  const reader: MeterReader = watch
    ? {
        onHeaders(headers) {
          meterReader.onHeaders(headers);
          watch.onHeaders(headers);
        },
        onChunk(chunk) {
          meterReader.onChunk(chunk);
          watch.onChunk(chunk);
        },
        onEnd() {
          meterReader.onEnd();
          watch.onEnd();
        },
        reading: () => meterReader.reading(),
      }
    : meterReader;
  const requestFailed = () => watch?.failed() ?? false;
  return {
    reader,
    track(status) {
      if (!persist) return { stop: () => undefined };
      let written = '';
      let writing = false;
      const timer = setInterval(() => {
        const reading = reader.reading();
        const charge = chargeFor(reading, meter, BigInt(maximum), {
          kind: 'answered',
          status,
          complete: false,
          requestFailed: requestFailed(),
        });
        const measured = {
          paymentCharge: String(charge.charge),
          meterReading: recorded(reading, charge.capped, charge.reason),
        };
        const key = JSON.stringify(measured);
        if (key === written || writing) return;
        writing = true;
        persist(measured)
          .then(
            () => (written = key),
            () => undefined, // the next tick tries again; the completion writes the whole truth anyway
          )
          .finally(() => (writing = false));
      }, PARTIAL_EVERY_MS);
      timer.unref();
      return { stop: () => clearInterval(timer) };
    },
    complete(outcome) {
      if (outcome.kind === 'answered') reader.onEnd();
      const reading = outcome.kind === 'answered' ? reader.reading() : { kind: 'none' as const };
      const seen = outcome.kind === 'answered' ? { ...outcome, requestFailed: requestFailed() } : outcome;
      const charge = chargeFor(reading, meter, BigInt(maximum), seen);
      recordMeterReading(mode, charge.reason, charge.capped);
      return {
        paymentCharge: String(charge.charge),
        meterReading: recorded(reading, charge.capped, charge.reason),
      };
    },
  };
}

/** The reading of a metered call completed without its meter read (charged 0), with why. */
export function unmeasuredReading(reason: 'not_measured' | 'gateway_lost'): RecordedReading {
  return { kind: 'none', capped: false, reason };
}

/**
 * SQL assignments that close a metered row without a reading of its own, and leave any other
 * row's null: for the statements that close a row knowing nothing of its agent. `not_measured`
 * (never forwarded, closed unfinished) charges 0. `gateway_lost` (its process died mid-stream)
 * keeps what was measured before (persistPartialCharge), else charges 0: what was measured is
 * charged, never more.
 */
export function unmeasuredColumns(reason: 'not_measured' | 'gateway_lost'): string {
  const reading = JSON.stringify(unmeasuredReading(reason));
  const kept = reason === 'gateway_lost';
  const charge = kept ? `coalesce(payment_charge, '0')` : `'0'`;
  const measured = kept
    ? `coalesce(meter_reading || '{"reason":"gateway_lost"}'::jsonb, '${reading}'::jsonb)`
    : `'${reading}'::jsonb`;
  return `payment_charge = case when payment_scheme is not null then ${charge} end,
         payment_amount = case when payment_scheme is not null then ${charge} else payment_amount end,
         meter_reading = case when payment_scheme is not null then ${measured} end`;
}

// What a running metered stream has measured so far, on its row: a process that dies mid-stream
// leaves it for the lost-stream sweep, which charges it (stale-streams.ts). Only while running.
const PARTIAL = `update invocations set payment_charge = ?, payment_amount = ?, meter_reading = ?::jsonb
  where id = ? and status = 'running' and payment_scheme is not null`;

/** Writes what a running metered call has measured so far (its charge, were it broken off now). */
export async function persistPartialCharge(
  execute: (sql: string, params: unknown[]) => Promise<unknown>,
  invocationId: string,
  measured: MeteredCompletion,
): Promise<void> {
  const { paymentCharge, meterReading } = measured;
  await execute(PARTIAL, [paymentCharge, paymentCharge, JSON.stringify(meterReading), invocationId]);
}

/** Left before a metered answer's charge must be sent: the settle's own time, kept back. */
const CHARGE_SLACK_MS = 2 * 60_000;

/**
 * When a metered answer must have ended for its charge to be collected: `chargeBy` (unix
 * seconds, the last moment its authorization is good for: the payment flow's `chargeBy`) less
 * the settle's time; null for a call without such a moment. Its process cuts the answer then
 * (api/invoke/streaming.ts), and the lost-stream sweep closes its row if it is still running
 * a while after (stale-streams.ts).
 */
export function streamEndsBy(chargeBy: number | null | undefined): Date | null {
  return chargeBy == null ? null : new Date(chargeBy * 1000 - CHARGE_SLACK_MS);
}

/** How a failed upstream call went, for its charge: never sent, or sent without an answer. */
export function failedOutcome(reached: boolean): UpstreamOutcome {
  return reached ? { kind: 'failed' } : { kind: 'not_forwarded' };
}
