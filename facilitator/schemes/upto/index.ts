// The `upto` scheme at the facilitator, in the same order as `exact` once the door has mapped the
// client certificate to an account: the body is an upto settle request in either envelope (else
// malformed: x402/schemes/upto/settle-request.ts), the facilitator is ready, the payer's
// signature and the payment's terms hold with the gas wallet as the witness's facilitator and the
// charge at most the permitted amount (else failed, nothing claimed), the guardrails that need no
// usage pass for the charge (limit); then the settlement's owner settles it through the same steps
// and SettlementWorkflow as `exact` (their upto parts: verify-upto.ts, upto-chain.ts). The key is
// the Permit2 nonce's (uptoSettlementKey), never an EIP-3009 one's.
import { getAddress } from 'ethers';
import { caip2Network } from '../../../x402/v2.ts';
import { CONTRACT_SIGNATURE_TIMEOUT_MS, contractSignatureCheckFor } from '../../../x402/erc1271.ts';
import { SCHEME_UPTO, permit2Nonce } from '../../../x402/schemes/upto/schemas.ts';
import { parseUptoSettleRequest } from '../../../x402/schemes/upto/settle-request.ts';
import { verifyUptoPayment } from '../../../x402/schemes/upto/verify.ts';
import { gasWalletAddress } from '../../config.ts';
import { uptoSettlementKey } from '../../store/records.ts';
import { staticGuardrail } from '../../store/reservations.ts';
import { settlementKind } from '../../settlement/request.ts';
import { uptoNetworks, uptoTermsMismatch } from '../../settlement/verify-upto.ts';
import type { FacilitatorScheme, SchemeDeps, SettleAnswer, Settler } from '../scheme.ts';
import { handOver } from '../hand-over.ts';

function uptoSettler(deps: SchemeDeps): Settler {
  const { config, settlements } = deps;
  return async function settleUpto(_generic, { account, deadline, body }): Promise<SettleAnswer> {
    const request = parseUptoSettleRequest(body);
    const a = request?.payment.payload.permit2Authorization;
    const nonce = a && permit2Nonce(a.nonce);
    if (!request || !a || nonce === null || nonce === undefined) return { answer: 'malformed' };
    const charged = { amount: request.charge, network: request.network };
    const failed = (payer: string, cause: string): SettleAnswer => {
      deps.log.info({ account: account.id, cause }, 'settle refused before any claim');
      return { answer: 'outcome', outcome: { status: 'failed', payer, transaction: null, cause }, charged };
    };
    const key = uptoSettlementKey(config.domain.chainId, config.tokenAddress, a.from, nonce);
    // The fast path's reads travel while readiness and the signature are checked.
    const reads = settlements.read(key, account.id, request);
    if (reads) await new Promise((resolve) => setImmediate(resolve));
    // Only a request whose signature holds may open (and so name) a settlement. A charge above
    // the permitted amount is refused here too (amount_mismatch), before anything is claimed.
    const verifying = verifyUptoPayment(
      request.payment,
      {
        network: request.network,
        token: config.domain,
        payTo: request.payTo,
        facilitator: gasWalletAddress(config),
        maxAmount: BigInt(request.charge),
        now: Math.floor(Date.now() / 1000),
        marginSeconds: config.validityMarginSeconds,
      },
      contractSignatureCheckFor(config.chainRpcUrl, CONTRACT_SIGNATURE_TIMEOUT_MS),
    ).catch(() => 'unreachable' as const);
    const readiness = await deps.readiness.current();
    if (!readiness.ready) return { answer: 'not_ready' };
    const verified = await verifying;
    if (verified === 'unreachable') return { answer: 'unavailable' };
    const mismatch = uptoTermsMismatch(config, request);
    if (!verified.ok || mismatch) {
      const cause = mismatch ?? (verified.ok ? 'invalid_payment' : verified.cause);
      // The payer is named only when the signature is not what failed.
      return failed(cause === 'invalid_signature' ? '' : getAddress(a.from.toLowerCase()), cause);
    }
    // The guardrails that need no usage, for the charge, before anything is stored.
    const refused = staticGuardrail({
      account,
      kind: settlementKind(request, config.network),
      amount: BigInt(request.charge),
      defaults: config.guardrails,
    });
    if (refused) {
      deps.log.info({ account: account.id, cause: refused }, 'settle refused before any claim');
      return { answer: 'limit' };
    }
    const answer = await handOver(deps, { key, account, request, deadline, reads });
    return answer.answer === 'outcome' ? { ...answer, charged } : answer;
  };
}

export const uptoFacilitatorScheme: FacilitatorScheme = {
  // The same chain and asset as `exact`; upto is an x402 v2 scheme, so its network is named in
  // CAIP-2. Clients sign for the gas wallet named here. /settle takes either name (uptoNetworks).
  kind: (config) => ({
    x402Version: 2,
    scheme: SCHEME_UPTO,
    network: caip2Network(config.domain.chainId),
    asset: config.tokenAddress,
    extra: { facilitatorAddress: gasWalletAddress(config) },
  }),
  settler: uptoSettler,
  networks: uptoNetworks,
};
