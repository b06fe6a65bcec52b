// POST /verify for `batch-settlement` (the x402 batch-settlement EVM spec: a server asks it of
// every deposit and refund, and of a voucher it cannot check itself): the client's deposit,
// voucher or refund payload against the requirements and the channel as the chain has it,
// answered `{isValid, payer, invalidReason?, extra: <the channel's state>}`. A deposit is checked
// as /settle's step 1 would (x402/schemes/batch-settlement/verify.ts, then the payer's balance
// and the deposit call simulated from the gas wallet); a voucher's ceiling may be at most the
// escrow and above the claimed total (a refund's at least it). Nothing is stored or signed.
import { getAddress } from 'ethers';
import { CONTRACT_SIGNATURE_TIMEOUT_MS, contractSignatureCheckFor } from '../../../x402/erc1271.ts';
import { parseBatchVerifyRequest } from '../../../x402/schemes/batch-settlement/settle-request.ts';
import { verifyDeposit, verifyVoucher } from '../../../x402/schemes/batch-settlement/verify.ts';
import { gasWalletAddress, receiverAuthorizerAddress } from '../../config.ts';
import { channelSnapshot, channelStateExtra, depositCalldata, simulateBatch } from '../../batch-chain.ts';
import { payerFunds } from '../../upto-chain.ts';
import { depositExpectation } from '../../settlement/verify-batch.ts';
import { uptoTermsMismatch } from '../../settlement/verify-upto.ts';
import type { SchemeDeps, VerifyAnswer, Verifier } from '../scheme.ts';

export function batchVerifier(deps: SchemeDeps): Verifier {
  const { config, chain } = deps;
  const contracts = contractSignatureCheckFor(config.chainRpcUrl, CONTRACT_SIGNATURE_TIMEOUT_MS);
  return async function verifyBatch(body): Promise<VerifyAnswer> {
    const request = parseBatchVerifyRequest(body);
    if (!request) return { answer: 'malformed' };
    const { payment } = request;
    const payer = payment.channelConfig.payer;
    const invalid = (invalidReason: string): VerifyAnswer => ({
      answer: 'verified',
      response: { isValid: false, invalidReason, payer },
    });
    if (uptoTermsMismatch(config, request)) return invalid('invalid_batch_settlement_evm_network_mismatch');
    try {
      const channel = await channelSnapshot(chain, payment.voucher.channelId.toLowerCase());
      if (payment.type === 'deposit') {
        const checked = await verifyDeposit(
          payment,
          depositExpectation(config, { ...request, action: payment }),
          channel,
          contracts,
        );
        if (!checked.ok) return invalid(checked.cause);
        const [funds, simulation] = await Promise.all([
          payerFunds(chain, getAddress(config.tokenAddress), checked.payer),
          simulateBatch(chain, { from: gasWalletAddress(config), data: depositCalldata(payment) }),
        ]);
        if (funds.balance < checked.amount) return invalid('invalid_batch_settlement_evm_insufficient_balance');
        if (simulation) return invalid('invalid_batch_settlement_evm_deposit_simulation_failed');
      } else {
        const checked = await verifyVoucher(
          payment,
          {
            chainId: config.domain.chainId,
            asset: config.tokenAddress,
            payTo: request.payTo,
            receiverAuthorizer: request.receiverAuthorizer ?? receiverAuthorizerAddress(config),
            withdrawDelay: request.withdrawDelay,
            ceiling: payment.type === 'refund' ? 0n : BigInt(request.amount),
          },
          channel,
          contracts,
        );
        if (!checked.ok) return invalid(checked.cause);
      }
      return { answer: 'verified', response: { isValid: true, payer, extra: channelStateExtra(channel) } };
    } catch {
      // The node or a contract wallet did not answer: not known, the caller may ask again.
      return { answer: 'unavailable' };
    }
  };
}
