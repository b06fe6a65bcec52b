// A claim batch the facilitator refuses is claimed in parts (docs/SETTLEMENT.md, "Channels:
// claims and settles"): one row it will not claim (a payer's contract wallet that answers
// otherwise on chain than to the gateway's check, a channel whose state moved in between) must not
// hold back the others, or a single payer stalls every claim of the tenant, round after round.
//
// A refused part is halved and its first half sent: claimed, the refusal is in the second half,
// which is halved in turn without being sent whole; refused, the refusal is in the first half,
// which is halved in turn, and the second half is kept aside, untried. A row that ends alone is
// sent alone (unless it just was): refused alone, it is set aside (the caller quarantines its
// channel); then everything kept aside goes in one request, so the good rows take as few
// transactions as the search allows, and is halved the same way if it is refused too. One refused
// row of N costs at most ceil(log2 N) + 2 requests beyond the first, and the requests of one
// call are capped. Claims are cumulative and each row keeps its total, so a part sent again (a
// later round, an activity's retry) claims nothing twice.
//
// Only a failed settlement (`settlement_failed`: the facilitator answered, and will not claim
// these rows) is split. A refusal of the request itself (`settlement_refused`: 400, 403 or 429,
// the account's limits or standing) is the account's, not a row's, and an answer not known
// (`settlement_unavailable`) is retried by the caller: either stops the split, the rows not
// claimed left for the next round.

/** A claim request's answer, as the facilitator client reduces it. */
export type PartAnswer =
  | { ok: true; transaction: string }
  | { ok: false; error: 'settlement_failed' | 'settlement_refused' | 'settlement_unavailable' };

export type PartsOutcome<R> = {
  /** The parts claimed, in the order sent, each with its transaction ('' when the chain held it already). */
  claimed: Array<{ rows: R[]; transaction: string }>;
  /** Rows the facilitator refused alone: their vouchers cannot be claimed as they are. */
  setAside: R[];
  /** Rows neither claimed nor set aside (refused with others, or not sent once the split stopped): the next round's. */
  left: R[];
  /** Claim requests sent, the first (the whole batch) included. */
  requests: number;
  /** Why the split stopped before it was done: an answer not known, the account refused, or no request left. */
  stopped: 'settlement_unavailable' | 'settlement_refused' | 'limit' | null;
};

/**
 * Claim requests one batch may cost: enough to set aside two refused rows of a full batch of
 * 100 (ceil(log2 100) + 2 = 9 requests each, beyond the first) and claim the rest.
 */
export const MAX_CLAIM_REQUESTS = 20;

/**
 * Sends `batch` as one claim, then, when the facilitator fails it, its parts as above.
 * `mayContinue` is asked before each request after the first (the caller's deadline): false
 * stops the split as the request limit does.
 */
export async function claimInParts<R>(
  batch: readonly R[],
  send: (part: R[]) => Promise<PartAnswer>,
  opts: { maxRequests?: number; mayContinue?: () => boolean } = {},
): Promise<PartsOutcome<R>> {
  const maxRequests = opts.maxRequests ?? MAX_CLAIM_REQUESTS;
  const out: PartsOutcome<R> = { claimed: [], setAside: [], left: [], requests: 0, stopped: null };

  /** One request: claimed, failed (a row of it will not be claimed), or stopped (nothing more is sent). */
  async function attempt(part: R[]): Promise<'claimed' | 'failed' | 'stopped'> {
    if (out.requests >= maxRequests || (out.requests > 0 && opts.mayContinue && !opts.mayContinue())) {
      out.stopped = 'limit';
      return 'stopped';
    }
    out.requests++;
    const answer = await send(part);
    if (answer.ok) {
      out.claimed.push({ rows: part, transaction: answer.transaction });
      return 'claimed';
    }
    if (answer.error === 'settlement_failed') return 'failed';
    out.stopped = answer.error;
    return 'stopped';
  }

  // Parts not tried since a refusal was found elsewhere: sent together once it is isolated.
  const untried: R[][] = [];

  /** Halves `failed` (a part that failed, or holds what failed a larger one) until what fails it is alone. */
  async function isolate(failed: R[]): Promise<void> {
    let refused = failed;
    // Whether `refused` is one row the facilitator refused alone.
    let alone = failed.length === 1;
    for (;;) {
      if (refused.length === 1 && alone) {
        out.setAside.push(refused[0]!);
        return;
      }
      const head = refused.length === 1 ? refused : refused.slice(0, Math.ceil(refused.length / 2));
      const tail = refused.slice(head.length);
      const sent = await attempt(head);
      if (sent === 'stopped') {
        out.left.push(...refused);
        return;
      }
      if (sent === 'claimed') {
        // The refusal is in the rest; a row left alone by this is still sent alone before it is set aside.
        if (!tail.length) return;
        refused = tail;
        alone = false;
      } else {
        if (tail.length) untried.push(tail);
        refused = head;
        alone = head.length === 1;
      }
    }
  }

  let part = [...batch];
  let result = await attempt(part);
  while (result === 'failed') {
    await isolate(part);
    if (out.stopped || !untried.length) break;
    part = untried.splice(0).flat();
    result = await attempt(part);
  }
  if (result === 'stopped') out.left.push(...part);
  out.left.push(...untried.flat());
  return out;
}
