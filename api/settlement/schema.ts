// Settlement configuration bodies (zod); the OpenAPI document is generated from these.
import { z } from 'zod';
import { idPattern, maxChars } from '../validation.ts';

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
  })
  .meta({ id: 'SettlementConfigInput' });
export type SettlementConfigInput = z.infer<typeof SettlementConfigInput>;

export const SettlementConfigView = z
  .strictObject({
    tenant_id: z.string(),
    facilitator_url: z.string(),
    facilitator_credential_ref: z.string(),
    created_at: z.iso.datetime({ offset: true }),
    updated_at: z.iso.datetime({ offset: true }),
  })
  .meta({ id: 'SettlementConfig' });
