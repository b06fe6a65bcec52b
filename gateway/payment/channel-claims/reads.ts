// The API's reads of a tenant's batch-settlement channels (GET /v1/channels, /v1/channels/{id}):
// what the gateway charged on each, the payer's latest voucher ceiling (never its signature),
// the chain's state as last mirrored, and how its claims went. Paged in channel id order (ids
// are the contract's hashes: the order is stable, a page boundary never shifts); the cursor is
// the last id of the previous page.
import type { GatewayDb } from '../../db/orm.ts';
import { absent } from '../../refusal.ts';

/** A channel id as the contract names it. */
const CHANNEL_ID = /^0x[0-9a-f]{64}$/;

export type ChannelView = {
  id: string;
  payer: string;
  receiver: string;
  receiver_authorizer: string;
  token: string;
  withdraw_delay: number;
  balance: string;
  total_claimed: string;
  charged_cumulative: string;
  signed_max_claimable: string;
  withdraw_requested_at: string | null;
  refund_nonce: string;
  last_request_at: string | null;
  claimed_at: string | null;
  claim_error: string | null;
  claim_quarantined_at: string | null;
  created_at: string;
};

const COLUMNS = `
  id, payer, receiver, receiver_authorizer, config->>'token' as token,
  (config->>'withdrawDelay')::bigint as withdraw_delay, balance::text, total_claimed::text,
  charged_cumulative::text, signed_max_claimable::text, withdraw_requested_at, refund_nonce::text,
  last_request_at, claimed_at, claim_error, claim_quarantined_at, created_at`;

type Row = Omit<
  ChannelView,
  'withdraw_requested_at' | 'withdraw_delay' | 'last_request_at' | 'claimed_at' | 'claim_quarantined_at' | 'created_at'
> & {
  withdraw_delay: string | number;
  withdraw_requested_at: string | number;
  last_request_at: Date | null;
  claimed_at: Date | null;
  claim_quarantined_at: Date | null;
  created_at: Date;
};

const iso = (d: Date | null) => (d ? new Date(d).toISOString() : null);

function view(r: Row): ChannelView {
  const requestedAt = Number(r.withdraw_requested_at);
  return {
    id: r.id,
    payer: r.payer,
    receiver: r.receiver,
    receiver_authorizer: r.receiver_authorizer,
    token: r.token,
    withdraw_delay: Number(r.withdraw_delay),
    balance: r.balance,
    total_claimed: r.total_claimed,
    charged_cumulative: r.charged_cumulative,
    signed_max_claimable: r.signed_max_claimable,
    withdraw_requested_at: requestedAt > 0 ? new Date(requestedAt * 1000).toISOString() : null,
    refund_nonce: r.refund_nonce,
    last_request_at: iso(r.last_request_at),
    claimed_at: iso(r.claimed_at),
    claim_error: r.claim_error,
    claim_quarantined_at: iso(r.claim_quarantined_at),
    created_at: new Date(r.created_at).toISOString(),
  };
}

/** At most `limit` of the tenant's channels after the id `after` (none: from the first). */
export async function channelsPage(
  db: GatewayDb,
  tenantId: string,
  page: { limit: number; after: string | undefined },
): Promise<{ data: ChannelView[]; next_cursor: string | null }> {
  const rows = await db.em
    .getConnection()
    .execute<Row[]>(`select ${COLUMNS} from channels where tenant_id = ? and id > ? order by id limit ?`, [
      tenantId,
      page.after ?? '',
      page.limit + 1,
    ]);
  const data = rows.slice(0, page.limit).map(view);
  return { data, next_cursor: rows.length > page.limit ? data[data.length - 1]!.id : null };
}

/** The tenant's channel; absent for a malformed id, another tenant's channel or none. */
export async function ownedChannel(db: GatewayDb, tenantId: string, id: string): Promise<ChannelView> {
  const channelId = id.toLowerCase();
  if (!CHANNEL_ID.test(channelId)) throw absent();
  const [row] = await db.em
    .getConnection()
    .execute<Row[]>(`select ${COLUMNS} from channels where tenant_id = ? and id = ?`, [tenantId, channelId]);
  if (!row) throw absent();
  return view(row);
}
