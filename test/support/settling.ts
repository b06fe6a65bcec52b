// Setups that the settlement tests share, each registering its own mocha hooks in the enclosing
// describe block: a facilitator of its own (its task queue and configuration), and a tenant
// that pays through a facilitator.
import { randomUUID } from 'node:crypto';
import type { JsonRpcProvider } from 'ethers';
import { stack } from './stack.ts';
import { startFacilitatorStack, type FacilitatorStack } from './facilitator.ts';
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
