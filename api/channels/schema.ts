// GET /v1/channels and /v1/channels/{id} (zod); the OpenAPI document is generated from these.
import { z } from 'zod';
import { PageQuery } from '../pagination.ts';

const amount = (description: string) => z.string().meta({ description: `${description} (token base units).` });
const address = z.string().meta({ description: 'An address, lowercase hex.' });
const CHANNEL_ID = /^0x[0-9a-fA-F]{64}$/;

export const ChannelView = z
  .strictObject({
    id: z.string().meta({ description: 'The on-chain channel id (bytes32, lowercase hex).' }),
    payer: address,
    receiver: address,
    receiver_authorizer: address,
    token: z.string(),
    withdraw_delay: z.int().meta({ description: "Seconds a payer's timed withdrawal waits before it can finalize." }),
    balance: amount('The escrow, as last read from the chain'),
    total_claimed: amount('What is claimed on chain, as last known'),
    charged_cumulative: amount('What the gateway charged on the channel in all'),
    signed_max_claimable: amount("The ceiling of the payer's latest voucher"),
    withdraw_requested_at: z.iso.datetime({ offset: true }).nullable().meta({
      description: "When the payer's pending timed withdrawal started, as last read from the chain; null: none.",
    }),
    refund_nonce: z.string(),
    last_request_at: z.iso.datetime({ offset: true }).nullable(),
    claimed_at: z.iso.datetime({ offset: true }).nullable().meta({ description: "The gateway's last claim of it." }),
    claim_error: z
      .string()
      .nullable()
      .meta({ description: 'Why its last claim left it out (e.g. claim_refused, escrow_short); null after a claim.' }),
    claim_quarantined_at: z.iso.datetime({ offset: true }).nullable().meta({
      description:
        'When the claims set the channel aside because its latest voucher cannot be claimed (claim_error says why); it is not claimed again until a newer voucher is committed on it. Null: not set aside.',
    }),
    created_at: z.iso.datetime({ offset: true }),
  })
  .meta({ id: 'Channel' });

export const ChannelList = z
  .strictObject({ data: z.array(ChannelView), next_cursor: z.string().nullable() })
  .meta({ id: 'ChannelList' });

export const ChannelListQuery = z.object({
  limit: PageQuery.limit,
  cursor: z.string({ error: 'cursor may be given once' }).regex(CHANNEL_ID, 'invalid cursor').optional().meta({
    description: '`next_cursor` of the previous page (the last channel id it listed); any other value is a 400.',
  }),
});

export const ChannelPath = z.object({
  id: z
    .string()
    .regex(CHANNEL_ID)
    .meta({ description: 'The channel id (0x and 64 hex digits). Any other value is answered 404.' }),
});
