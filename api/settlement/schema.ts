// Settlement configuration bodies (zod); the OpenAPI document is generated from these.
import { z } from 'zod';
import { idPattern, maxChars } from '../validation.ts';

const MIN_CLAIM_EVERY_SECONDS = 10;
/** A day: a period longer than that would leave charges unclaimed past any reasonable window. */
const MAX_CLAIM_EVERY_SECONDS = 86_400;
export const DEFAULT_CLAIM_EVERY_SECONDS = 300;

export const SettlementConfigInput = z
  .strictObject({
    facilitator_url: maxChars(
      z.string({
        error: (i) => (i.input === undefined ? 'facilitator_url is required' : 'facilitator_url must be a string'),
      }),
      2048,
      'facilitator_url is too long',
    ).meta({
      description:
        'https URL of the facilitator with a public host (else 400); `/settle` is called on it with mutual TLS.',
      example: 'https://facilitator.example.com',
    }),
    facilitator_credential_ref: z
      .string({
        error: (i) =>
          i.input === undefined
            ? 'facilitator_credential_ref is required'
            : 'facilitator_credential_ref must be a string',
      })
      .regex(idPattern('cred'), 'facilitator_credential_ref does not name a credential')
      .meta({
        description:
          'ID of a credential of the tenant whose secret is a PEM client certificate and its private key (see docs/CATALOG.md).',
      }),
    claim_every_seconds: z
      .int({ error: 'claim_every_seconds must be an integer' })
      .min(MIN_CLAIM_EVERY_SECONDS, `claim_every_seconds must be at least ${MIN_CLAIM_EVERY_SECONDS}`)
      .max(MAX_CLAIM_EVERY_SECONDS, `claim_every_seconds must be at most ${MAX_CLAIM_EVERY_SECONDS}`)
      .optional()
      .meta({
        description: `batch-settlement channels: seconds between claims of the tenant's outstanding vouchers (default ${DEFAULT_CLAIM_EVERY_SECONDS}; docs/SETTLEMENT.md, "Channels: claims and settles").`,
      }),
    claim_threshold: z
      .string({ error: 'claim_threshold must be a string' })
      .regex(/^[1-9][0-9]{0,37}$/, 'claim_threshold must be a positive whole amount in base units, as a decimal string')
      .nullable()
      .optional()
      .meta({
        description:
          'batch-settlement channels: the unclaimed amount (token base units, decimal string) past which they are claimed sooner than the period; absent or null: the period only.',
        example: '1000000',
      }),
  })
  .meta({
    id: 'SettlementConfigInput',
    description:
      'The whole configuration: PUT replaces it, so an absent claim_every_seconds or claim_threshold is its default (300, none).',
  });
export type SettlementConfigInput = z.infer<typeof SettlementConfigInput>;

export const SettlementConfigView = z
  .strictObject({
    tenant_id: z.string(),
    facilitator_url: z.string(),
    facilitator_credential_ref: z.string(),
    claim_every_seconds: z
      .int()
      .meta({ description: "Seconds between claims of the tenant's batch-settlement channels." }),
    claim_threshold: z
      .string()
      .nullable()
      .meta({ description: 'The unclaimed amount (base units) that claims sooner; null: the period only.' }),
    created_at: z.iso.datetime({ offset: true }),
    updated_at: z.iso.datetime({ offset: true }),
  })
  .meta({ id: 'SettlementConfig' });
