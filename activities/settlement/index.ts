// The settlement activities, created from their dependencies (pool, chain provider, gas
// wallet signer, configuration); the facilitator worker registers what this returns. Each
// activity runs its steps in order, and each step is idempotent against the facilitator's
// records, so a retried or replayed activity only does what is still missing.
import { Context } from '@temporalio/activity';
import { getAddress } from 'ethers';
import { completeSettlement, findSettlement, loadSettleRequest, recordRejected, type SettlementRecord } from '../../facilitator/store.ts';
import { findAccountById } from '../../facilitator/accounts.ts';
import { outcomeOfRecord, reverify } from './verify.ts';
import { claim, sign } from './claim.ts';
import { awaitInclusion, broadcast, recordInclusion, signedOrThrow, sleep } from './send.ts';
import type { Prepared, SettlementActivities, SettlementDeps, SettlementOutcome } from './types.ts';

const WATCH_WINDOW_MS = 10_000;
const WATCH_PAUSE_MS = 2_000;

export function createSettlementActivities(deps: SettlementDeps): SettlementActivities {
  // What this worker just signed and stored, handed to its own delivery step without reading
  // it back; a delivery on another worker (after a crash) reads the record instead.
  const justSigned = new Map<string, SettlementRecord>();
  return {
    /** Re-verify → guardrails and claim → sign and store. Nothing here can reach the chain. */
    async prepareSettlement(key): Promise<Prepared> {
      const [stored, existing] = await Promise.all([loadSettleRequest(deps.pool, key), findSettlement(deps.pool, key)]);
      if (existing?.status === 'settled' || existing?.status === 'failed') return { step: 'final', outcome: outcomeOfRecord(existing) };
      // A resumed run whose bytes already exist goes straight to delivery: re-verifying now
      // would see its own transaction's effects (a used nonce) as a reason to refuse.
      if (existing?.txHash) return { step: 'signed', payer: getAddress(existing.payer), txHash: existing.txHash };
      if (!stored) throw new Error('settle request missing for key');
      const authorization = stored.request.paymentPayload.payload.authorization;
      // Lowercased first: a mixed-case address with a bad checksum must not throw here (the
      // signature check, which does not care about case, already passed in the handler).
      const payer = getAddress(authorization.from.toLowerCase());

      // The account (for the guardrails) is read while the chain is asked.
      const [checked, account] = await Promise.all([reverify(deps, stored.request), findAccountById(deps.pool, stored.accountId)]);
      if (!checked.ok) {
        // A claimed record (a run resumed after a crash) gives its reservation back.
        if (existing) await completeSettlement(deps.pool, key, { status: 'failed', cause: checked.cause });
        else {
          await recordRejected(deps.pool, {
            key,
            accountId: stored.accountId,
            payer,
            payTo: authorization.to,
            amount: BigInt(authorization.value),
            validBefore: BigInt(authorization.validBefore),
            cause: checked.cause,
          });
        }
        return { step: 'rejected', payer, cause: checked.cause };
      }
      if (!account) throw new Error('facilitator account missing');
      const claimed = await claim(deps, key, account, stored.request, checked.transfer);
      if ('rejected' in claimed) return { step: 'refused', payer, guardrail: claimed.rejected };
      const signed = await sign(deps, key, stored.request, checked.gas);
      if (justSigned.size >= 10_000) justSigned.clear();
      justSigned.set(key, signed);
      return { step: 'signed', payer, txHash: signed.txHash! };
    },

    /** Broadcast → first-block inclusion → record. Only ever sends the stored bytes. */
    async deliverSettlement(key, inclusionTimeoutMs): Promise<SettlementOutcome> {
      const cached = justSigned.get(key);
      justSigned.delete(key);
      const record = signedOrThrow(cached ?? (await findSettlement(deps.pool, key)));
      if (record.status === 'settled' || record.status === 'failed') return outcomeOfRecord(record);
      await broadcast(deps, record);
      const inclusion = await awaitInclusion(deps, record, Date.now() + inclusionTimeoutMs);
      return recordInclusion(deps, key, inclusion);
    },

    /**
     * After an inclusion timeout: keeps watching (and re-sending the same bytes) until the
     * transaction is mined, then records the real outcome. A mined transaction is final either
     * way, even a revert, so this ends once the gas wallet can pay for it.
     */
    async watchSettlement(key): Promise<SettlementOutcome> {
      const record = signedOrThrow(await findSettlement(deps.pool, key));
      if (record.status === 'settled' || record.status === 'failed') return outcomeOfRecord(record);
      const context = Context.current();
      for (;;) {
        const inclusion = await awaitInclusion(deps, record, Date.now() + WATCH_WINDOW_MS, () => context.heartbeat());
        if (inclusion.mined) return recordInclusion(deps, key, inclusion);
        context.heartbeat();
        await sleep(WATCH_PAUSE_MS);
      }
    },
  };
}

export type { SettlementActivities, SettlementDeps, SettlementOutcome } from './types.ts';
