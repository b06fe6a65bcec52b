// Setups that the settlement tests share, each registering its own mocha hooks in the enclosing
// describe block: a facilitator of its own (its task queue and configuration), and a tenant
// that pays through a facilitator.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { JsonRpcProvider } from 'ethers';
import { createChainProvider } from '../../facilitator/chain.ts';
import type { FacilitatorConfig } from '../../facilitator/config.ts';
import { createFeeOracle } from '../../facilitator/fees.ts';
import { loadKeystoreSigner } from '../../facilitator/signer.ts';
import { storedGasNonce } from '../../facilitator/store/gas.ts';
import { reserveNonce } from '../../facilitator/store/reservations.ts';
import { saveSettleRequest } from '../../facilitator/store/requests.ts';
import { presign } from '../../facilitator/settlement/reserve.ts';
import { settlementKind, type SettlementRequest } from '../../facilitator/settlement/request.ts';
import { reverify } from '../../facilitator/settlement/verify.ts';
import { stack } from './stack.ts';
import { startFacilitatorStack, until, type FacilitatorStack } from './facilitator.ts';
import type { SettlementOutcome } from '../../facilitator/settlement/types.ts';
import { chainProvider, newAccount, settlingTenant, type TestAccount } from './x402.ts';
import { startUpstream, type TestUpstream } from './upstream.ts';

export type OwnFacilitator = { provider: JsonRpcProvider; gateway: TestAccount; facilitator: FacilitatorStack };

/**
 * A facilitator of its own (task queue `facilitator-{name}`, `overrides` for the rest of its
 * configuration), a gateway's account on it and a chain provider, handed to `use` once started
 * and closed after the block (automining switched back on first: some tests stop it).
 */
export function withOwnFacilitator(
  name: string,
  overrides: Record<string, string>,
  use: (own: OwnFacilitator) => void,
): void {
  let own: OwnFacilitator | undefined;
  before(async () => {
    const provider = chainProvider();
    const gateway = await newAccount(`${name}-gateway`);
    const facilitator = await startFacilitatorStack(stack().infra, stack().temporal, {
      overrides: { FACILITATOR_TASK_QUEUE: `facilitator-${name}`, ...overrides },
    });
    own = { provider, gateway, facilitator };
    use(own);
  });
  after(async () => {
    if (!own) return;
    await own.provider.send('evm_setAutomine', [true]).catch(() => undefined);
    await own.gateway.client.close();
    await own.facilitator.close();
    own.provider.destroy();
  });
}

export type PayingTenant = {
  provider: JsonRpcProvider;
  upstream: TestUpstream;
  /** The facilitator account whose client certificate the tenant's settlement configuration holds. */
  account: TestAccount;
  tenant: string;
  token: string;
};

/**
 * A tenant (`tenant-{name}-…`) whose settlement goes through the stack's facilitator with a new
 * account's client certificate, an upstream and a chain provider, handed to `use` and closed
 * after the block.
 */
export function withPayingTenant(name: string, use: (paying: PayingTenant) => void): void {
  let paying: PayingTenant | undefined;
  before(async () => {
    const provider = chainProvider();
    const upstream = await startUpstream();
    const account = await newAccount(`${name}-${randomUUID()}`);
    const tenant = `tenant-${name}-${randomUUID()}`;
    // The tenant's settlement configuration: the facilitator's URL and a credential holding the
    // client certificate of a facilitator account.
    paying = { provider, upstream, account, tenant, token: await settlingTenant(tenant, account) };
    use(paying);
  });
  after(async () => {
    if (!paying) return;
    await paying.upstream.close();
    await paying.account.client.close();
    paying.provider.destroy();
  });
}

/**
 * What a /settle handler that died before its workflow start and its send committed: the
 * request, then the claim with the signed bytes (re-verification, presigning and the
 * reservation statement, as the handler runs them), with the gas wallet `config` names. Nothing
 * is sent.
 */
export async function claimAsDeadHandler(
  facilitator: Pick<FacilitatorStack, 'pool' | 'config'>,
  account: TestAccount['account'],
  key: string,
  request: SettlementRequest,
  config: FacilitatorConfig = facilitator.config,
): Promise<void> {
  const chain = createChainProvider(config.chainRpcUrl, config.domain.chainId);
  try {
    const deps = {
      pool: facilitator.pool,
      provider: chain,
      signer: await loadKeystoreSigner(config),
      fees: createFeeOracle(chain),
      config,
    };
    assert.equal(await saveSettleRequest(facilitator.pool, key, account.id, request), true);
    const checked = await reverify(deps, request);
    assert.ok(checked.ok, checked.ok ? '' : checked.cause);
    const presigned = await presign(
      deps,
      request,
      checked.gas,
      await storedGasNonce(facilitator.pool, deps.signer.address, config.domain.chainId),
    );
    const reserved = await reserveNonce(facilitator.pool, {
      key,
      account,
      kind: settlementKind(request, config.network),
      ...checked.transfer,
      defaults: config.guardrails,
      gasAtRiskWei: checked.gas.gasLimit * checked.gas.maxFeePerGas,
      presigned,
    });
    assert.ok(
      'reserved' in reserved && reserved.reserved.status === 'signed' && reserved.reserved.txHash === presigned.hash,
      'claimed with its bytes',
    );
  } finally {
    chain.destroy();
  }
}

/** A settlement workflow's result, once the sweeper has started it and it has run (read on the shared stack's client). */
export function settlementWorkflowResult(key: string): Promise<SettlementOutcome> {
  return until(
    'the settlement workflow',
    async () => {
      const handle = stack().temporal.workflow.getHandle(key);
      const described = await handle.describe().catch(() => null);
      return described?.status.name === 'COMPLETED' ? ((await handle.result()) as SettlementOutcome) : null;
    },
    60_000,
  );
}
