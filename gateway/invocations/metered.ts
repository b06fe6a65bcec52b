// A metered (x402 `upto`) call's record: its scheme and the maximum the payer signed, set when
// the call is admitted, and, when it completes, what its meter read (gateway/metering/) and the
// charge that comes to, written by the completing statement of either mode (store.ts,
// stream-records.ts). Recorded only: nothing here settles the charge.
import type { Pricing, RecordedReading } from '../db/entities.ts';
import type { Meter } from '../metering/meter.ts';
import { createMeterReader, DEFAULT_METER_MAX_BYTES, type MeterReader, type MeterReading } from '../metering/reader.ts';
import { chargeFor, type UpstreamOutcome } from '../metering/charge.ts';
import { recordMeterReading } from '../metrics.ts';
import { SCHEME_UPTO as UPTO } from '../../x402/schemes/upto/schemas.ts';

/** The agent's meter when its pricing is metered (`upto` with a meter), else null. */
export function meterOf(pricing: Pricing | null | undefined): Meter | null {
  return pricing?.scheme === UPTO && pricing.meter ? pricing.meter : null;
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
  return { paymentScheme: metered ? UPTO : null, paymentMaxAmount: metered ? maximum : null };
}

/** What a metered call's completion writes. */
type MeteredCompletion = { paymentCharge: string; meterReading: RecordedReading };

export type MeteredCall = {
  /** Fed the answer's headers and body chunks as they pass. */
  reader: MeterReader;
  /** Ends the reading (call once, after the body ended or broke off) and says the charge. */
  complete(outcome: UpstreamOutcome): MeteredCompletion;
};

/** The reading as JSON holds it (an amount is a uint256: its decimal text). */
function recorded(reading: MeterReading, capped: boolean, reason: string): RecordedReading {
  const measured = reading.kind === 'amount' ? { kind: 'amount' as const, amount: String(reading.amount) } : reading;
  return { ...measured, capped, reason };
}

/**
 * The metering of one call of a metered agent, or null when the call is not metered (no meter,
 * or no maximum recorded). The reader holds at most DEFAULT_METER_MAX_BYTES.
 */
export function meteredCall(
  meter: Meter | null,
  maximum: string | null,
  mode: 'transactional' | 'streaming',
): MeteredCall | null {
  if (!meter || maximum === null) return null;
  const reader = createMeterReader(meter, { maxBytes: DEFAULT_METER_MAX_BYTES });
  return {
    reader,
    complete(outcome) {
      if (outcome.kind === 'answered') reader.onEnd();
      const reading = outcome.kind === 'answered' ? reader.reading() : { kind: 'none' as const };
      const charge = chargeFor(reading, meter, BigInt(maximum), outcome);
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
 * SQL assignments that close a metered row without a reading (charge 0), and leave any other
 * row's null: for the statements that close a row knowing nothing of its agent.
 */
export function unmeasuredColumns(reason: 'not_measured' | 'gateway_lost'): string {
  const reading = JSON.stringify(unmeasuredReading(reason));
  return `payment_charge = case when payment_scheme is not null then '0' end,
         meter_reading = case when payment_scheme is not null then '${reading}'::jsonb end`;
}

/** How a failed upstream call went, for its charge: never sent, or sent without an answer. */
export function failedOutcome(reached: boolean): UpstreamOutcome {
  return reached ? { kind: 'failed' } : { kind: 'not_forwarded' };
}
