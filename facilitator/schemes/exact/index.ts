// The `exact` scheme at the facilitator, in the v1 contract's order once the door has mapped the
// client certificate to an account and parsed the body: the payload is an EIP-3009 one (else
// malformed), the facilitator is ready, the signature holds and the requirements match the
// authorization (else failed, nothing claimed), the guardrails that need no usage pass (limit);
// then the settlement's owner settles it (facilitator/settlement/: the steps SettlementWorkflow
// runs). Nothing touches the chain before those checks pass.
import type { SettleRequest } from '../../../x402/schemas.ts';
import { recoverAuthorizer } from '../../../x402/schemes/exact/eip3009.ts';
import { asExactSettleRequest, EXACT, type ExactSettleRequest } from '../../../x402/schemes/exact/schemas.ts';
import { authorizationSigner, termsMismatch } from '../../../x402/schemes/exact/verify.ts';
import { CONTRACT_SIGNATURE_TIMEOUT_MS, contractSignatureCheckFor } from '../../../x402/erc1271.ts';
import type { FacilitatorConfig } from '../../config.ts';
import { settlementKey } from '../../store/records.ts';
import { staticGuardrail } from '../../store/reservations.ts';
import type { FacilitatorScheme, SchemeDeps, SettleAnswer, Settler } from '../scheme.ts';
import { handOver } from '../hand-over.ts';

/**
 * Why the request's requirements cannot be those of its authorization (null when they can):
 * the time-independent terms, checked before the request may open or join a settlement.
 */
function requirementsMismatch(config: FacilitatorConfig, request: ExactSettleRequest): string | null {
  const { paymentPayload: payment, paymentRequirements: requirements } = request;
  if (request.x402Version !== 1) return 'unsupported_version';
  if (requirements.scheme !== payment.scheme || requirements.network !== payment.network)
    return 'requirements_mismatch';
  return termsMismatch(payment, {
    network: config.network,
    domain: config.domain,
    asset: requirements.asset,
    payTo: requirements.payTo,
    amount: { atMost: BigInt(requirements.maxAmountRequired) },
  });
}

const failed = (payer: string, cause: string): SettleAnswer => ({
  answer: 'outcome',
  outcome: { status: 'failed', payer, transaction: null, cause },
});

function exactSettler(deps: SchemeDeps): Settler {
  const { config, settlements } = deps;
  return async function settleExact(generic: SettleRequest | null, { account, deadline }): Promise<SettleAnswer> {
    const request = generic && asExactSettleRequest(generic);
    if (!request) return { answer: 'malformed' };
    const authorization = request.paymentPayload.payload.authorization;
    const signature = request.paymentPayload.payload.signature;
    const key = settlementKey(config.domain.chainId, config.tokenAddress, authorization.from, authorization.nonce);
    // The outbox's reads (chain, records; nothing written) travel while readiness and the
    // signature are checked; a request refused below never uses them.
    const reads = settlements.read(key, account.id, request);
    // Lets those requests reach their sockets before the signature recovery holds the thread.
    if (reads) await new Promise((resolve) => setImmediate(resolve));
    // Only a request whose signature holds may open (and so name) a settlement: otherwise a
    // forged request could occupy a payer's nonce before the real one arrives.
    // An EOA's signature recovers `from` (no I/O); a contract wallet's is accepted by `from`
    // (ERC-1271, an eth_call), asked while readiness is read.
    const signing = authorizationSigner(
      config.domain,
      authorization,
      signature,
      contractSignatureCheckFor(config.chainRpcUrl, CONTRACT_SIGNATURE_TIMEOUT_MS),
    ).catch(() => 'unreachable' as const);
    const readiness = await deps.readiness.current();
    if (!readiness.ready) return { answer: 'not_ready' };
    const signedBy = await signing;
    if (signedBy === 'unreachable') return { answer: 'unavailable' };
    if (!signedBy) {
      deps.log.info({ account: account.id, cause: 'invalid_signature' }, 'settle refused before any claim');
      const payer = recoverAuthorizer(config.domain, authorization, signature) ? authorization.from : '';
      return failed(payer, 'invalid_signature');
    }
    // Requirements that do not match the authorization claim nothing, so they cannot poison it
    // for the submission that carries the right ones.
    const mismatch = requirementsMismatch(config, request);
    if (mismatch) {
      deps.log.info({ account: account.id, cause: mismatch }, 'settle refused before any claim');
      return failed(authorization.from, mismatch);
    }

    // The guardrails that need no usage, before anything is stored: a submission they refuse
    // claims nothing, so it cannot take the authorization from the account it belongs to.
    const refused = staticGuardrail({
      account,
      kind: { network: request.paymentRequirements.network, asset: request.paymentRequirements.asset },
      amount: BigInt(authorization.value),
      defaults: config.guardrails,
    });
    if (refused) {
      deps.log.info({ account: account.id, cause: refused }, 'settle refused before any claim');
      return { answer: 'limit' };
    }

    return handOver(deps, { key, account, request, deadline, reads });
  };
}

export const exactFacilitatorScheme: FacilitatorScheme = {
  kind: (config) => ({ x402Version: 1, scheme: EXACT, network: config.network, asset: config.tokenAddress }),
  settler: exactSettler,
};
