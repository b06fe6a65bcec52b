// Batch-settlement channels as the gateway holds them, for the tests of their claims and their
// API: real channels, opened by the unmodified client's deposit settled through the stack's
// facilitator (test/support/batch-settlement.ts), and their rows in `channels` as the admission
// writes them (the channel's config, what the gateway charged on it, the payer's latest voucher).
import assert from 'node:assert/strict';
import { stack } from './stack.ts';
import { batchPayer, type BatchTerms } from './batch-settlement.ts';
import { newPayer, type TestAccount } from './x402.ts';
import type { BatchSettlementPayment } from '../../x402/schemes/batch-settlement/schemas.ts';

export const CHANNEL_PRICE = 1_000n;
export const CHANNEL_DEPOSIT = 10_000n;
const NETWORK = 'eip155:8453';

type Payload = BatchSettlementPayment['payload'];

export type OpenedChannel = {
  channelId: string;
  terms: BatchTerms;
  payer: ReturnType<typeof batchPayer>;
  wallet: Awaited<ReturnType<typeof newPayer>>;
  /** The deposit's payload: its voucher is the payer's first (ceiling: one call's price). */
  deposit: Payload;
};

/** The x402 v2 settle body of a batch-settlement payload, as a server sends it for `payTo`. */
function batchSettleBody(payload: unknown, payTo: string, amount = CHANNEL_PRICE) {
  const token = stack().infra.tokenAddress;
  return {
    x402Version: 2,
    paymentPayload: {
      x402Version: 2,
      accepted: { scheme: 'batch-settlement', network: NETWORK, asset: token, amount: '0', payTo },
      payload,
    },
    paymentRequirements: {
      scheme: 'batch-settlement',
      network: NETWORK,
      asset: token,
      amount: String(amount),
      payTo,
      maxTimeoutSeconds: 300,
      extra: {
        name: 'USD Coin',
        version: '2',
        receiverAuthorizer: stack().infra.receiverAuthorizer.address,
        withdrawDelay: 900,
      },
    },
  };
}

/**
 * `count` channels to `payTo`, each a payer of its own that deposited CHANNEL_DEPOSIT through the
 * stack's facilitator (as `account`), a few deposits at a time; `payer` configures the payers'
 * client (batchPayer).
 */
export async function openChannels(
  account: TestAccount,
  payTo: string,
  count: number,
  payer: Parameters<typeof batchPayer>[1] = {},
): Promise<OpenedChannel[]> {
  const terms: BatchTerms = {
    asset: stack().infra.tokenAddress,
    payTo,
    receiverAuthorizer: stack().infra.receiverAuthorizer.address,
    amount: CHANNEL_PRICE,
    minDeposit: CHANNEL_DEPOSIT,
  };
  // Funded one after another: the dev account mints each.
  const wallets: Array<Awaited<ReturnType<typeof newPayer>>> = [];
  for (let i = 0; i < count; i++) wallets.push(await newPayer(2n * CHANNEL_DEPOSIT));
  const opened: OpenedChannel[] = [];
  let next = 0;
  async function lane() {
    while (next < wallets.length) {
      const wallet = wallets[next++]!;
      const client = batchPayer(wallet.privateKey, payer);
      const deposit = (await client.pay(terms)).payload;
      assert.equal(deposit.type, 'deposit');
      const res = await account.client.post('/settle', batchSettleBody(deposit, payTo));
      assert.equal(res.status, 200, JSON.stringify(res.json));
      assert.equal(res.json.success, true, JSON.stringify(res.json));
      opened.push({ channelId: deposit.voucher.channelId.toLowerCase(), terms, payer: client, wallet, deposit });
    }
  }
  await Promise.all(Array.from({ length: Math.min(8, count) }, lane));
  return opened;
}

/** The payer's next voucher once told it was charged `charged` so far (its ceiling: that and one price). */
export async function nextVoucher(channel: OpenedChannel, charged: bigint): Promise<Payload> {
  await channel.payer.record(channel.channelId, { balance: CHANNEL_DEPOSIT, charged });
  return (await channel.payer.pay(channel.terms)).payload;
}

export type ChannelRowInput = {
  channel: OpenedChannel;
  /** What the gateway charged on it in all. */
  charged: bigint;
  /** The payer's latest voucher (default: the deposit's). */
  voucher?: Payload;
};

/** Writes the channels' rows for `tenantId` in one statement, as the admission keeps them. */
export async function insertChannelRows(tenantId: string, rows: ChannelRowInput[]): Promise<void> {
  const values = rows.map(({ channel, charged, voucher = channel.deposit }) => {
    const config = voucher.channelConfig;
    return {
      id: channel.channelId,
      payer: config.payer.toLowerCase(),
      receiver: config.receiver.toLowerCase(),
      receiver_authorizer: config.receiverAuthorizer.toLowerCase(),
      config,
      charged: String(charged),
      signed: voucher.voucher.maxClaimableAmount,
      signature: voucher.voucher.signature,
      balance: String(CHANNEL_DEPOSIT),
    };
  });
  await stack()
    .orm.em.getConnection()
    .execute(
      `insert into channels (id, tenant_id, payer, receiver, receiver_authorizer, config, charged_cumulative,
                             signed_max_claimable, signature, balance, last_request_at)
       select v.id, ?, v.payer, v.receiver, v.receiver_authorizer, v.config, v.charged::numeric, v.signed::numeric,
              v.signature, v.balance::numeric, now()
         from jsonb_to_recordset(?::jsonb) as v(id text, payer text, receiver text, receiver_authorizer text,
              config jsonb, charged text, signed text, signature text, balance text)`,
      [tenantId, JSON.stringify(values)],
    );
}

/** The channel's row as the database holds it. */
export async function channelRow(channelId: string): Promise<Record<string, any>> {
  const [row] = await stack()
    .orm.em.getConnection()
    .execute(
      `select total_claimed::text, charged_cumulative::text, balance::text, withdraw_requested_at::int,
              claimed_at, claim_error
         from channels where id = ?`,
      [channelId],
    );
  return row as Record<string, any>;
}
