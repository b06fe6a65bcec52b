// The `batch-settlement` scheme as the protocol registry (x402/schemes/index.ts) knows it: its
// payload is a deposit, voucher or refund over the channel's config (schemas.ts); the payer is
// the config's `payer`.
import { schemaProtocol } from '../scheme.ts';
import { BatchSettlementPayload, SCHEME_BATCH_SETTLEMENT } from './schemas.ts';

export const batchSettlementProtocol = schemaProtocol(
  SCHEME_BATCH_SETTLEMENT,
  BatchSettlementPayload,
  (payload) => payload.channelConfig.payer,
);
