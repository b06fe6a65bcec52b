// The `batch-settlement` scheme at the facilitator (the x402 EVM binding's payment channels), in
// the order of the others once the door has mapped the client certificate to an account: the
// body is an x402 v2 batch-settlement settle request (else malformed:
// x402/schemes/batch-settlement/settle-request.ts), the network and asset are ours, the
// facilitator is ready; then what needs no gas: a deposit's authorization and voucher, every
// row of a claim (our receiver authorizer, a total within the voucher's ceiling, the voucher's
// signature), a refund's zero-charge voucher, asked by the account whose deposit into the
// channel was settled here (else failed, nothing stored or moved). The settlement is then named,
// so a retry of the same request is the same settlement and the same workflow: a deposit by its ERC-3009 nonce, a claim by its ClaimBatch digest, a settle by the
// receiver's claimed total it sweeps up to, a refund by its channel and refund nonce (both read
// from the chain when the request leaves them out, with the refund's amount: all the unclaimed
// escrow). The guardrails that need no usage pass for what it moves (limit); then the
// settlement's owner settles it through the same steps and SettlementWorkflow as every scheme
// (their batch-settlement part: verify-batch.ts, batch-chain.ts). The answer names what moved
// (`amount`: a deposit's, a settle's, a refund's; empty for a claim, which moves no token) and,
// for a deposit or refund, the channel's state after it (`extra.channelState`).
import { getAddress } from 'ethers';
import { caip2Network } from '../../../x402/v2.ts';
import { CONTRACT_SIGNATURE_TIMEOUT_MS, contractSignatureCheckFor } from '../../../x402/erc1271.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../../../x402/schemes/batch-settlement/schemas.ts';
import {
  parseBatchSettleRequest,
  type BatchSettleRequest,
} from '../../../x402/schemes/batch-settlement/settle-request.ts';
import { channelIdOf, erc3009DepositNonce } from '../../../x402/schemes/batch-settlement/typed-data.ts';
import { verifyClaimRow, verifyDeposit, verifyVoucher } from '../../../x402/schemes/batch-settlement/verify.ts';
import { gasWalletAddress, receiverAuthorizerAddress } from '../../config.ts';
import { batchActionDayKey, batchActionKey, settlementKey } from '../../store/records.ts';
import { depositedBy } from '../../store/requests.ts';
import { staticGuardrail } from '../../store/reservations.ts';
import { settlementKind, settlementTerms } from '../../settlement/request.ts';
import { batchTermsMismatch, claimBatchDigestOf, depositExpectation } from '../../settlement/verify-batch.ts';
import { uptoNetworks } from '../../settlement/verify-upto.ts';
import { channelSnapshot, channelStateExtra, movedBy, receiverTotals } from '../../batch-chain.ts';
import type { FacilitatorScheme, SchemeDeps, SettleAnswer, Settler } from '../scheme.ts';
import { handOver } from '../hand-over.ts';
import { batchVerifier } from './verifier.ts';

/** What the handler settled on before naming the settlement: its key and the request as stored. */
type Named = { key: string; request: BatchSettleRequest } | { cause: string };

function batchSettler(deps: SchemeDeps): Settler {
  const { config, chain } = deps;
  const chainId = config.domain.chainId;
  const contracts = contractSignatureCheckFor(config.chainRpcUrl, CONTRACT_SIGNATURE_TIMEOUT_MS);
  const expectClaim = () => ({
    chainId,
    asset: config.tokenAddress,
    receiverAuthorizer: receiverAuthorizerAddress(config),
  });

  /** The off-chain checks and the chain reads that name the settlement. */
  async function name(request: BatchSettleRequest, accountId: string): Promise<Named> {
    const { action } = request;
    const token = config.tokenAddress;
    switch (action.type) {
      case 'deposit': {
        const channelId = action.voucher.channelId.toLowerCase();
        const checked = await verifyDeposit(
          action,
          depositExpectation(config, { ...request, action }),
          await channelSnapshot(chain, channelId),
          contracts,
        );
        if (!checked.ok) return { cause: checked.cause };
        const auth = action.deposit.authorization;
        if (!('erc3009Authorization' in auth)) return { cause: 'erc3009_authorization_required' };
        const nonce = erc3009DepositNonce(channelId, auth.erc3009Authorization.salt);
        return { key: settlementKey(chainId, token, checked.payer, nonce), request };
      }
      case 'claim': {
        const rows = await Promise.all(action.claims.map((row) => verifyClaimRow(row, expectClaim(), contracts)));
        const failed = rows.find((row) => !row.ok);
        if (failed && !failed.ok) return { cause: failed.cause };
        const receiver = settlementTerms(request).payer;
        return {
          key: await batchActionDayKey(deps.pool, (day) =>
            batchActionKey(chainId, token, receiver, 'claim', `${claimBatchDigestOf(chainId, action.claims)}-${day}`),
          ),
          request,
        };
      }
      case 'settle': {
        const receiver = getAddress(action.receiver.toLowerCase());
        const { totalClaimed } = await receiverTotals(chain, receiver, token);
        const settledUpTo = totalClaimed.toString();
        return {
          key: await batchActionDayKey(deps.pool, (day) =>
            batchActionKey(chainId, token, receiver, 'settle', `${settledUpTo}-${day}`),
          ),
          request: { ...request, resolved: { settledUpTo } },
        };
      }
      case 'refund': {
        let channelId: string;
        try {
          channelId = channelIdOf(chainId, action.channelConfig);
        } catch {
          return { cause: 'invalid_batch_settlement_evm_channel_id_mismatch' };
        }
        // This facilitator signs the refund for the receiver: only the account whose deposit into
        // the channel it settled may ask it (the receiver's server), never another account.
        if (!(await depositedBy(deps.pool, accountId, channelId))) return { cause: 'refund_not_the_depositor' };
        const channel = await channelSnapshot(chain, channelId);
        const checked = await verifyVoucher(
          action,
          {
            chainId,
            asset: token,
            payTo: request.payTo,
            receiverAuthorizer: receiverAuthorizerAddress(config),
            withdrawDelay: request.withdrawDelay,
            ceiling: 0n,
          },
          channel,
          contracts,
        );
        if (!checked.ok) return { cause: checked.cause };
        const refundNonce = action.refundNonce ?? channel.refundNonce.toString();
        // All of the unclaimed escrow once the voucher's ceiling is claimed, unless an amount is asked.
        const claimed =
          checked.maxClaimableAmount > channel.totalClaimed ? checked.maxClaimableAmount : channel.totalClaimed;
        // Nothing left to refund is step 1's to say: a retry of a refund that took it all is the same settlement.
        const refundAmount = action.amount ?? (channel.balance - claimed).toString();
        return {
          key: batchActionKey(chainId, token, checked.payer, 'refund', `${channelId}-${BigInt(refundNonce)}`),
          request: { ...request, resolved: { refundNonce, refundAmount } },
        };
      }
    }
  }

  /** What a settled answer names: the amount moved and, for a deposit or refund, the channel's state after it. */
  async function settledTerms(
    request: BatchSettleRequest,
    transaction: string | null,
  ): Promise<{ amount: string; extra?: Record<string, unknown> }> {
    const { action } = request;
    const stateAfter = async (channelId: string) => ({
      channelState: channelStateExtra(await channelSnapshot(chain, channelId)),
    });
    switch (action.type) {
      case 'deposit':
        return { amount: action.deposit.amount, extra: await stateAfter(action.voucher.channelId.toLowerCase()) };
      case 'claim':
        return { amount: '' };
      case 'settle':
        return { amount: String(transaction ? ((await movedBy(chain, transaction, 'Settled')) ?? 0n) : 0n) };
      case 'refund': {
        const moved = transaction ? await movedBy(chain, transaction, 'Refunded') : 0n;
        return {
          amount: String(moved ?? 0n),
          extra: await stateAfter(channelIdOf(chainId, action.channelConfig)),
        };
      }
    }
  }

  return async function settleBatch(_generic, { account, deadline, body }): Promise<SettleAnswer> {
    const parsed = parseBatchSettleRequest(body);
    if (!parsed) return { answer: 'malformed' };
    const charged = { amount: '', network: parsed.network };
    const failed = (cause: string): SettleAnswer => {
      deps.log.info({ account: account.id, cause }, 'settle refused before any claim');
      return { answer: 'outcome', outcome: { status: 'failed', payer: '', transaction: null, cause }, charged };
    };
    const readiness = await deps.readiness.current();
    if (!readiness.ready) return { answer: 'not_ready' };
    const mismatch = batchTermsMismatch(config, parsed);
    if (mismatch) return failed(mismatch);
    let named: Named;
    try {
      named = await name(parsed, account.id);
    } catch {
      // The node or a contract wallet did not answer: nothing was stored, the caller may retry.
      return { answer: 'unavailable' };
    }
    if ('cause' in named) return failed(named.cause);
    const { key, request } = named;
    // The guardrails that need no usage, before anything is stored; the reservation asks them
    // again for what the chain says the settlement moves.
    const refused = staticGuardrail({
      account,
      kind: settlementKind(request, config.network),
      amount: settlementTerms(request).amount,
      defaults: config.guardrails,
    });
    if (refused) {
      deps.log.info({ account: account.id, cause: refused }, 'settle refused before any claim');
      return { answer: 'limit' };
    }
    const reads = deps.settlements.read(key, account.id, request);
    const answer = await handOver(deps, { key, account, request, deadline, reads });
    if (answer.answer !== 'outcome') return answer;
    if (answer.outcome.status !== 'settled') return { ...answer, charged };
    try {
      const terms = await settledTerms(request, answer.outcome.transaction);
      return { ...answer, charged: { amount: terms.amount, network: parsed.network }, extra: terms.extra };
    } catch {
      // Settled: the chain's word on what it moved is missing, not the settlement.
      return { ...answer, charged };
    }
  };
}

export const batchSettlementFacilitatorScheme: FacilitatorScheme = {
  // The same chain and asset as `exact`, named in CAIP-2 (an x402 v2 scheme). Servers delegating
  // claims and refunds name the receiver authorizer given here in their channels' config; the
  // gas wallet relays every transaction (the spec's `signers`).
  kind: (config) => ({
    x402Version: 2,
    scheme: SCHEME_BATCH_SETTLEMENT,
    network: caip2Network(config.domain.chainId),
    asset: config.tokenAddress,
    extra: { receiverAuthorizer: receiverAuthorizerAddress(config) },
  }),
  settler: batchSettler,
  verifier: batchVerifier,
  networks: uptoNetworks,
  signers: (config) => [gasWalletAddress(config)],
};
