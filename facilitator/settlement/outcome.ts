// Step 4's record: a mined attempt's outcome, or `pending`. A revert is checked against the
// chain: the authorization used by another transaction that paid this settlement is a
// settlement, never a failure (an upto authorization's Permit2 nonce: upto-chain.ts). After a mined cancel the payer's authorization may still be
// valid: the transfer is then submitted again at a new gas nonce (resubmit.ts).
import { authorizationUse, type AuthorizationUse } from '../chain.ts';
import {
  completeSettlement,
  isBatchActionKey,
  isUptoKey,
  parseSettlementKey,
  uptoNonceOfKey,
  type FinalOutcome,
  type SettlementRecord,
} from '../store/records.ts';
import { uptoAuthorizationUse } from '../upto-chain.ts';
import { failedGasWei } from '../metrics.ts';
import { broadcast } from './broadcast.ts';
import { mayResubmit, resubmit } from './resubmit.ts';
import type { Signed } from './signed.ts';
import { outcomeOfRecord } from './verify.ts';
import type { Inclusion, SettlementDeps, SettlementOutcome } from './types.ts';

/**
 * What the chain says of this settlement's authorization as of `toBlock`: the token of an EIP-3009
 * one (a batch-settlement deposit's included: its transfer goes to the collector), Permit2 and
 * the upto proxy's transfers of an upto one (upto-chain.ts).
 */
function authorizationUseOf(
  deps: SettlementDeps,
  record: SettlementRecord,
  toBlock: number,
): Promise<AuthorizationUse> {
  // A batch-settlement claim, settle or refund uses no authorization of the payer's: nothing
  // else can have settled it, and with no window (validBefore 0) a revert or a cancel is final.
  if (isBatchActionKey(record.key)) return Promise.resolve({ used: false });
  if (isUptoKey(record.key))
    return uptoAuthorizationUse(
      deps.provider,
      deps.config.tokenAddress,
      { payer: record.payer, nonce: uptoNonceOfKey(record.key), payTo: record.payTo, amount: record.amount },
      toBlock,
    );
  const { nonce } = parseSettlementKey(record.key);
  return authorizationUse(
    deps.provider,
    deps.config.tokenAddress,
    { payer: record.payer, nonce, payTo: record.payTo, amount: record.amount },
    toBlock,
  );
}

/**
 * A mined transfer that reverted. When the token's authorization is used and that use paid
 * this settlement (someone else submitted the same authorization first: the payer's signature
 * was public in the node's pool; or, after a revert for want of balance, the payer or anyone
 * submitted it once the balance was back), the payer's money moved: the settlement is settled,
 * with the transaction that used the authorization, and never answered `success: false` (the
 * payer would sign and pay again, charged twice for one call). Used otherwise (the payer spent
 * or cancelled the nonce): failed, nothing was collected and nothing can be. Unused: the
 * reverted transaction is public with the signed authorization in its calldata, so anyone can
 * submit it again until validBefore, once the payer has the funds (or its wallet accepts the
 * signature again). A final failure now would make the payer sign and pay again, then be
 * charged a second time by the old authorization; so the record stays `pending` (answered
 * `503`) until the chain has a block at or past validBefore (then failed: it can no longer
 * land), or the authorization is used. While the chain is far enough from validBefore
 * (mayResubmit) and the transfer would now succeed (the payer topped up), it is submitted
 * again at a new gas nonce, within the bound shared with re-submissions after a cancel, so the
 * payer gets its call instead of waiting. The token is asked as of the node's latest block (at
 * least the revert's: a node behind it errors and the step retries), with that block's
 * timestamp as the chain's clock, so every use up to the moment of the record counts and the
 * log window ends where the state was read. Whatever the outcome, the revert's gas is charged
 * to the account's failed-gas budget, once (completeSettlement).
 */
async function afterRevert(
  deps: SettlementDeps,
  record: SettlementRecord,
  revert: Inclusion & { mined: true },
): Promise<FinalOutcome | { resubmitted: Signed }> {
  const failedGasWei = revert.gasUsed * revert.gasPrice;
  const charged = { failedGasWei, revertTxHash: revert.txHash };
  const latest = await deps.provider.getBlock('latest');
  if (!latest) throw new Error('the node has no latest block');
  const atBlock = Math.max(latest.number, revert.blockNumber);
  const use = await authorizationUseOf(deps, record, atBlock);
  if (use.used && use.paid)
    return {
      status: 'settled',
      blockNumber: use.paid.blockNumber,
      gasUsed: revert.gasUsed,
      txHash: use.paid.txHash,
      ...charged,
    };
  const failed = {
    status: 'failed' as const,
    cause: 'reverted',
    blockNumber: revert.blockNumber,
    gasUsed: revert.gasUsed,
    txHash: revert.txHash,
    ...charged,
  };
  // A latest block older than the revert's (a load-balanced node behind) says nothing of the
  // chain's clock now: not known, so the step retries.
  if (latest.number < revert.blockNumber) throw new Error('the node is behind the revert’s block');
  if (use.used || BigInt(latest.timestamp) >= record.validBefore) return failed;
  if (mayResubmit(deps.config, latest.timestamp, record.validBefore)) {
    const again = await resubmit(deps, record);
    if (again) return { resubmitted: again };
  }
  return { status: 'pending', cause: 'reverted', txHash: revert.txHash, ...charged };
}

/**
 * After a mined cancel. The token decides first: an authorization used since (anyone could
 * submit it: its signature was public in the node's pool) is settled when that use paid this
 * settlement, failed when the payer used or cancelled its nonce otherwise. Unused while the
 * chain is still more than an inclusion timeout plus the validity margin before validBefore
 * (mayResubmit): the payer asked to pay for
 * this call and the chain only stalled, so the transfer is submitted again at a new gas nonce
 * (at most MAX_RESUBMISSIONS times). Unused closer to validBefore: `pending` until the chain has
 * a block at or past validBefore (no later block can include it), then failed.
 */
async function afterCancel(
  deps: SettlementDeps,
  record: SettlementRecord,
  cancel: Inclusion & { mined: true },
): Promise<FinalOutcome | { resubmitted: Signed }> {
  const latest = await deps.provider.getBlock('latest');
  if (!latest) throw new Error('the node has no latest block');
  const cancelled = {
    status: 'failed' as const,
    cause: 'inclusion_timeout',
    blockNumber: cancel.blockNumber,
    gasUsed: cancel.gasUsed,
    txHash: cancel.txHash,
  };
  const use = await authorizationUseOf(deps, record, latest.number);
  if (use.used)
    return use.paid
      ? { status: 'settled', blockNumber: use.paid.blockNumber, gasUsed: 0n, txHash: use.paid.txHash }
      : cancelled;
  if (mayResubmit(deps.config, latest.timestamp, record.validBefore)) {
    const again = await resubmit(deps, record);
    if (again) return { resubmitted: again };
  }
  return BigInt(latest.timestamp) < record.validBefore ? { status: 'pending', cause: 'inclusion_timeout' } : cancelled;
}

/**
 * Records a mined attempt's outcome, or `pending` (not mined; a cancel mined, or a transfer
 * reverted, with the authorization unused before validBefore; or a transfer submitted again
 * and not yet mined).
 */
export async function recordInclusion(
  deps: SettlementDeps,
  record: SettlementRecord,
  inclusion: Inclusion,
): Promise<SettlementOutcome> {
  let outcome: FinalOutcome;
  if (!inclusion.mined) outcome = { status: 'pending', cause: 'inclusion_timeout' };
  else if (inclusion.success && !inclusion.cancelled)
    outcome = {
      status: 'settled',
      blockNumber: inclusion.blockNumber,
      gasUsed: inclusion.gasUsed,
      txHash: inclusion.txHash,
    };
  else {
    const next = inclusion.cancelled
      ? await afterCancel(deps, record, inclusion)
      : await afterRevert(deps, record, inclusion);
    if ('resubmitted' in next) {
      // A revert's gas is charged before the re-submission moves the record to its new nonce.
      if (!inclusion.cancelled) await complete(deps, record.key, chargeOnly(inclusion));
      // Sent now; a node answering with the receipt (anvil, EIP-7966) decides it at once,
      // else the record waits (`pending`, its bytes now the submitted transfer's) for the watch.
      const included = await broadcast(deps, next.resubmitted);
      if (included?.mined) return recordInclusion(deps, next.resubmitted, included);
      outcome = { status: 'pending', cause: 'inclusion_timeout' };
    } else outcome = next;
  }
  // A watcher re-reading a revert that is still undecided writes (and announces) nothing new.
  if (
    outcome.status === 'pending' &&
    record.status === 'pending' &&
    record.failureCause === outcome.cause &&
    (!outcome.txHash || outcome.txHash.toLowerCase() === record.txHash?.toLowerCase())
  )
    return outcomeOfRecord(record);
  return outcomeOfRecord(await complete(deps, record.key, outcome));
}

/** Writes the outcome; a revert's gas is counted in the metric by the statement that charged it (a watcher may record the same revert again). */
async function complete(deps: SettlementDeps, key: string, outcome: FinalOutcome): Promise<SettlementRecord> {
  const recorded = await completeSettlement(deps.pool, key, outcome);
  if (recorded.gasChargedNow && outcome.failedGasWei)
    failedGasWei.inc(
      { account: recorded.accountId, budget: recorded.ownGas ? 'own' : 'payers' },
      Number(outcome.failedGasWei),
    );
  return recorded;
}

/** The revert's gas charged to the account's budget; the record stays `pending`, its bytes the re-submission's. */
function chargeOnly(revert: Inclusion & { mined: true }): FinalOutcome {
  return {
    status: 'pending',
    cause: 'reverted',
    failedGasWei: revert.gasUsed * revert.gasPrice,
    revertTxHash: revert.txHash,
  };
}
