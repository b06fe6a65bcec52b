// The channels this API process holds between calls. A payer pays call after call from one
// channel, so the process that served a voucher keeps its channel's lease (store.ts) after the
// call, with the channel's state in memory: the payer's next voucher here is checked against that
// state and admitted with no round trip to take the lease again (admission.ts). The process's own
// calls on a held channel take turns (one at a time, in arrival order), which is what the lease
// gives between processes.
//
// A held channel is let go (its lease released once every charge this process committed to it
// has been written) when no call used it for CHANNEL_HOLD_IDLE_MS, when another process asks for it (a
// `channel-wanted:<id>` notification on the change feed, sent by a lease that found it busy), or
// when a payment this path does not take (a deposit, a refund, a payment identifier, a
// transactional call) comes for it here. The lease is short (HOLD_LEASE_SECONDS: a process that
// dies holding a channel keeps it from the payer that long at most) and renewed while held, every
// hold of the process in one statement; a renewal or a commit that finds it taken from under this
// process ends the hold at once.
import { setTimeout as sleep } from 'node:timers/promises';
import type { MikroORM } from '@mikro-orm/postgresql';
import { closeWithOrm } from '../../db/orm.ts';
import { createKeyedQueue } from '../../../lib/keyed-queue.ts';
import { channelsHeld } from '../../metrics.ts';
import type { Logger } from '../../../lib/log.ts';
import { errorKind } from '../../../lib/error-kind.ts';
import type { ChangeFeed } from '../../db/change-feed.ts';
import type { ChannelRow, CommittedCharge } from './store.ts';
import {
  CHANNEL_WANTED,
  HOLD_LEASE_SECONDS,
  HOLD_RENEW_EVERY_MS,
  LEASE_SECONDS,
  releaseChannelLease,
  renewChannelLeases,
} from './store.ts';

/** How long letting a channel go waits for this process's commits on it to be written. */
const COMMITS_WAIT_MS = 10_000;
/** How long a stopping process waits to let its held channels go (a lease left behind lapses by itself). */
const CLOSE_MS = 2_000;
/** A hold is trusted for its lease's length less this margin after it was last renewed (a paused process's clock). */
const HOLD_MARGIN_MS = 5_000;
/** How long a call waits for its untrusted hold's lease to be checked before it is told the channel is busy. */
const RECHECK_DEADLINE_MS = 2_000;
/**
 * A moment on both clocks: trust is a span of time, which a step of the wall clock must not
 * stretch (the monotonic one) and a suspended machine must not hide (the wall one, which counts it).
 */
type Instant = { mono: number; wall: number };
const now = (): Instant => ({ mono: performance.now(), wall: Date.now() });
const HOLD_TRUST_MS = HOLD_LEASE_SECONDS * 1000 - HOLD_MARGIN_MS;
/** Whether a hold whose lease was last renewed (or taken) by a statement sent at `at` is still trusted without asking the database. */
const trusted = (at: Instant, t = now()) => t.mono - at.mono < HOLD_TRUST_MS && t.wall - at.wall < HOLD_TRUST_MS;
const later = (a: Instant, b: Instant): Instant => (b.mono > a.mono ? b : a);

/** A channel this process holds: its lease token, its tenant and its state as this process keeps it. */
type HeldChannel = {
  readonly token: string;
  readonly tenantId: string;
  row: ChannelRow;
};

type Held = HeldChannel & {
  /** When the statement that last renewed (or took) the lease was sent: trusted for HOLD_TRUST_MS from then. */
  renewedAt: Instant;
  /** A renewal of this hold's lease is in flight (another is not sent meanwhile). */
  renewing: boolean;
  /** This process's charge commits on the channel, in call order; the release waits for them. */
  commits: Promise<void>;
  /** How many of them are queued or in flight. */
  committing: number;
  idle: NodeJS.Timeout | null;
  wanted: boolean;
};

/** A call's turn on a channel: the held channel (if any) and the release of the turn. */
export type ChannelTurn = {
  /**
   * The channel as held here; null when it is not (or its lease turned out to be another's);
   * 'unknown' when its lease could not be checked in time (the caller answers the channel busy).
   */
  held(): Promise<HeldChannel | null | 'unknown'>;
  /**
   * Holds the channel under the lease `token` just taken, with its row as the lease read it;
   * `askedAt` (leaseAskedAt()): when the statement that took it was sent, or earlier.
   */
  hold(token: string, tenantId: string, row: ChannelRow, askedAt: LeaseAskedAt): HeldChannel;
  /** Stops holding the channel, its lease left to the caller (a channel found unfunded). */
  unhold(): void;
  /**
   * The call `call` is admitted on the held channel with this voucher: its turn lasts until its
   * charge (finish) or its refusal (abandon).
   */
  admitted(call: string, voucher: Voucher): void;
  /** Ends the turn; the next call waiting on the channel here goes on. */
  end(): void;
};

/** When a lease was asked for, as a hold's trust counts it. */
type LeaseAskedAt = Instant;
export const leaseAskedAt = now;

/** The voucher a call on a held channel was admitted with. */
type Voucher = { maxClaimable: bigint; signature: string };

export type ChannelOwners = ReturnType<typeof createChannelOwners>;

export function createChannelOwners(
  orm: MikroORM,
  log: Logger,
  feed: ChangeFeed | undefined,
  opts: { idleMs: number },
) {
  const { idleMs } = opts;
  const held = new Map<string, Held>();
  /** Each channel's turns, in arrival order: a turn is a task that lasts until it ends. */
  const turns = createKeyedQueue();
  /** The admitted call whose turn it is, by channel. */
  const active = new Map<string, { call: string; voucher: Voucher; turn: ChannelTurn }>();
  let closed = false;
  /** Holds being let go: their leases are still renewed until released (their commits are awaited first). */
  const releasing = new Map<string, Held>();
  /** The renewal of every hold, running while any is held. */
  let renewals: NodeJS.Timeout | null = null;

  /** Waits for the channel's turn, at most `waitMs`; null when it did not come in time. */
  async function turn(channelId: string, waitMs: number): Promise<ChannelTurn | null> {
    let end!: () => void;
    const mine = new Promise<void>((resolve) => (end = resolve));
    let started!: () => void;
    const comes = new Promise<true>((resolve) => (started = () => resolve(true)));
    void turns(channelId, () => (started(), mine));
    let timer: NodeJS.Timeout | undefined;
    const came = await Promise.race([
      comes,
      new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), waitMs))),
    ]).finally(() => clearTimeout(timer));
    if (!came) {
      end(); // the turn passes through at once when it comes
      return null;
    }
    const entry = held.get(channelId);
    if (entry?.idle) clearTimeout(entry.idle);
    if (entry) entry.idle = null;
    let ended = false;
    const t: ChannelTurn = {
      async held() {
        const h = held.get(channelId);
        if (!h || trusted(h.renewedAt)) return h ?? null;
        // Not renewed in time (renewals failing, a paused process): the lease may have lapsed.
        // Renewed now if its token is still the channel's (no new lease: this one would block it;
        // a lease nobody took since is safely this process's again), within the renewals' deadline.
        const sent = now();
        const kept = await Promise.race([
          renewChannelLeases(orm, [{ id: channelId, token: h.token }], HOLD_LEASE_SECONDS).catch(() => null),
          sleep(RECHECK_DEADLINE_MS, null, { ref: false }),
        ]);
        if (held.get(channelId) !== h) return null;
        // Not known: the hold stays (its lease may still be this process's); this call is told busy.
        if (kept === null) return 'unknown';
        if (!kept.has(channelId)) {
          drop(channelId, h);
          return null;
        }
        h.renewedAt = later(h.renewedAt, sent);
        return h;
      },
      hold(token, tenantId, row, askedAt) {
        const h: Held = {
          token,
          tenantId,
          row,
          renewedAt: askedAt,
          renewing: false,
          commits: Promise.resolve(),
          committing: 0,
          idle: null,
          wanted: false,
        };
        held.set(channelId, h);
        channelsHeld.inc();
        renewals ??= setInterval(renewAll, HOLD_RENEW_EVERY_MS).unref();
        return h;
      },
      unhold() {
        const h = held.get(channelId);
        if (h) drop(channelId, h);
      },
      admitted(call, voucher) {
        active.set(channelId, { call, voucher, turn: t });
      },
      end() {
        if (ended) return;
        ended = true;
        const h = held.get(channelId);
        end();
        if (!h) return;
        // Asked for (or stopping): let go (in a turn queued after those already waiting here).
        // Else after a while unused: the next turn to come clears the timer, and one that gave
        // up waiting never does, so the timer is always set.
        if (h.wanted || closed) void letGo(channelId);
        else h.idle = setTimeout(() => void letGo(channelId), idleMs).unref();
      },
    };
    return t;
  }

  /** The turn of `call` on the channel, taken off the active calls; null when it is not the active call. */
  function take(channelId: string, call: string) {
    const a = active.get(channelId);
    if (!a || a.call !== call) return null;
    active.delete(channelId);
    return a;
  }

  function drop(channelId: string, h: Held): void {
    if (held.get(channelId) !== h) return;
    held.delete(channelId);
    channelsHeld.dec();
    if (h.idle) clearTimeout(h.idle);
  }

  /**
   * Renews in one statement the leases of the holds (and of those being let go) not renewed for a
   * period (a commit renews its hold's too); a hold whose lease is another's now ends.
   */
  function renewAll(): void {
    if (held.size === 0 && releasing.size === 0 && renewals) {
      clearInterval(renewals);
      renewals = null;
    }
    const sent = now();
    // Not one whose renewal is still in flight (a statement that hangs is not piled on).
    const due = [...held.entries(), ...releasing.entries()].filter(
      ([, h]) => !h.renewing && sent.mono - h.renewedAt.mono >= HOLD_RENEW_EVERY_MS / 2,
    );
    if (due.length === 0) return;
    for (const [, h] of due) h.renewing = true;
    void renewChannelLeases(
      orm,
      due.map(([id, h]) => ({ id, token: h.token })),
      HOLD_LEASE_SECONDS,
    )
      .then(
        (kept) => {
          for (const [id, h] of due) {
            if (kept.has(id)) h.renewedAt = later(h.renewedAt, sent);
            else if (held.get(id) === h) drop(id, h);
          }
        },
        (err: unknown) => {
          // Not renewed now: the leases still run; each hold is trusted as long as it was.
          log.warn({ channels: due.length, err: errorKind(err) }, 'could not renew held channels');
        },
      )
      .finally(() => {
        for (const [, h] of due) h.renewing = false;
      });
  }

  /**
   * Releases the channel's lease in a turn of its own (waiting for it at most `waitMs`), once this
   * process's commits on it are written (at most COMMITS_WAIT_MS: a commit not written by then is
   * the due-charges round's, which never touches a hold's lease).
   */
  async function letGo(channelId: string, waitMs = LEASE_SECONDS * 1000): Promise<void> {
    const t = await turn(channelId, waitMs);
    if (!t) return;
    try {
      const h = held.get(channelId);
      if (!h) return;
      drop(channelId, h);
      // Renewed until released: its commits may take longer than what is left of its lease.
      releasing.set(channelId, h);
      try {
        await Promise.race([h.commits, sleep(COMMITS_WAIT_MS, undefined, { ref: false })]);
        await releaseChannelLease(orm, { id: channelId, leaseToken: h.token });
      } finally {
        if (releasing.get(channelId) === h) releasing.delete(channelId);
      }
    } finally {
      t.end();
    }
  }

  closeWithOrm(orm, () => owners.close());
  feed?.subscribe((key) => {
    if (key === '*' || !key.startsWith(CHANNEL_WANTED)) return;
    const channelId = key.slice(CHANNEL_WANTED.length);
    const h = held.get(channelId);
    if (!h || h.wanted) return;
    h.wanted = true;
    // In a turn after the running call's (if any), and those already waiting here.
    void letGo(channelId);
  });

  const owners = {
    turn,
    /**
     * Lets the channel go if held (a payment the held path does not take has come for it),
     * waiting at most `waitMs` for the calls on it here: past that, the caller's lease finds it
     * busy, as another process's would.
     */
    async relinquish(channelId: string, waitMs: number): Promise<void> {
      const h = held.get(channelId);
      if (!h) return;
      h.wanted = true;
      await letGo(channelId, waitMs);
    },
    /**
     * A call's charge, as its turn ends: the held state moves on at once (the payer's next voucher
     * is checked against it) when the charge fits the highest voucher, and `commit` (the charge's
     * write) is chained after the channel's earlier commits; the lease is let go if the commit
     * finds it is no longer this process's.
     */
    finish(
      channelId: string,
      call: string,
      charge: bigint,
      /** The charge's write; `keep`: the lease is still this process's hold (renewed by the commit). */
      commit: (keep: boolean) => Promise<CommittedCharge>,
    ): void {
      const a = take(channelId, call);
      const h = held.get(channelId);
      if (!a || !h) {
        a?.turn.end();
        void commit(false).catch(() => undefined);
        return;
      }
      const { voucher } = a;
      const ceiling = voucher.maxClaimable > h.row.signedMaxClaimable ? voucher.maxClaimable : h.row.signedMaxClaimable;
      if (h.row.charged + charge <= ceiling)
        h.row = {
          ...h.row,
          charged: h.row.charged + charge,
          ...(voucher.maxClaimable > h.row.signedMaxClaimable
            ? { signedMaxClaimable: voucher.maxClaimable, signature: voucher.signature }
            : {}),
        };
      h.committing++;
      h.commits = h.commits.then(async () => {
        try {
          const sent = now();
          // Kept (renewed) only while the hold is this process's still: a hold dropped or being
          // let go meanwhile must not have its lease brought back by a commit queued before.
          const outcome = await commit(held.get(channelId) === h);
          // A commit that found the lease another's: the hold is over (the lease is theirs now).
          if (outcome.recorded && !outcome.held) drop(channelId, h);
          else if (held.get(channelId) === h) {
            // The commit renewed the lease it found still this process's.
            if (outcome.held) h.renewedAt = later(h.renewedAt, sent);
            if (outcome.row) h.row = newer(h.row, outcome.row);
          }
        } catch (err) {
          // Left to the due-charges round (charges.ts), which commits it the same way.
          log.warn({ channelId, err: errorKind(err) }, 'could not commit a held channel charge');
        } finally {
          h.committing--;
        }
      });
      a.turn.end();
    },
    /** Whether charges of the channel held here are still queued or being written. */
    committing(channelId: string): boolean {
      return (held.get(channelId)?.committing ?? 0) > 0;
    },
    /**
     * The hold under `token` wrote nothing, fenced out by its lease (another's now, or lapsed):
     * trusted no more, its next call checks the lease (held(): renewed if still its token, else
     * the hold ends). Not dropped here: a lapsed lease nobody took is still this process's to
     * renew or release, never left behind.
     */
    lost(channelId: string, token: string): void {
      const h = held.get(channelId);
      if (h?.token === token) h.renewedAt = { mono: -Infinity, wall: -Infinity };
    },
    /** Ends the turn of a call refused after its admission, nothing charged. */
    abandon(channelId: string, call: string): void {
      take(channelId, call)?.turn.end();
    },
    /** Lets every held channel go (the process stops), waiting at most CLOSE_MS for calls still on them. */
    async close(): Promise<void> {
      closed = true;
      if (renewals) clearInterval(renewals);
      renewals = null;
      const released = Promise.all([...held.keys()].map((id) => letGo(id).catch(() => undefined)));
      await Promise.race([released, sleep(CLOSE_MS, undefined, { ref: false })]);
    },
  };
  return owners;
}

/**
 * The held state after the database's row of a commit: what others write (the chain's mirror:
 * escrow, claims, a withdrawal) from the database when its read is newer; the charged total and
 * the latest voucher never move back (this process's later charges may not be written yet).
 */
export function newer(mine: ChannelRow, db: ChannelRow): ChannelRow {
  const fresher = db.syncedAt !== null && (mine.syncedAt === null || db.syncedAt > mine.syncedAt);
  return {
    ...mine,
    charged: db.charged > mine.charged ? db.charged : mine.charged,
    ...(db.signedMaxClaimable > mine.signedMaxClaimable
      ? { signedMaxClaimable: db.signedMaxClaimable, signature: db.signature }
      : {}),
    totalClaimed: db.totalClaimed > mine.totalClaimed ? db.totalClaimed : mine.totalClaimed,
    refundNonce: db.refundNonce > mine.refundNonce ? db.refundNonce : mine.refundNonce,
    ...(fresher ? { balance: db.balance, withdrawRequestedAt: db.withdrawRequestedAt, syncedAt: db.syncedAt } : {}),
  };
}

/**
 * Lets a call's channel go when the call is refused after its admission, nothing charged: a turn
 * on a held channel ends (the hold stays), any other call's lease is released (store.ts). Never throws.
 */
export async function letChannelGo(
  orm: MikroORM,
  owners: ChannelOwners | null,
  channel: { id: string; leaseToken: string; turn?: { call: string } } | null | undefined,
): Promise<void> {
  if (channel?.turn) owners?.abandon(channel.id, channel.turn.call);
  else await releaseChannelLease(orm, channel);
}
