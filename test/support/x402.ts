// x402 helpers for tests: payers with test USDC, signed `exact` payments built exactly as x402
// clients build them, facilitator accounts with fresh client certificates from the dev CA,
// and an undici client for the facilitator's mutual-TLS listener.
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { Agent, request } from 'undici';
import { Wallet, getAddress, hexlify, parseEther, JsonRpcProvider } from 'ethers';
import { privateKeyToAccount } from 'viem/accounts';
import { x402Client } from '@x402/core/client';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { fund, tokenContract } from '../../scripts/dev/chain.ts';
import { issueClientCert, type CertAndKeyPem } from '../../scripts/dev/pki.ts';
import { addAccount, type Account, type AccountKind } from '../../facilitator/accounts.ts';
import { TRANSFER_WITH_AUTHORIZATION_TYPES } from '../../x402/schemes/exact/eip3009.ts';
import type { PaymentRequirements } from '../../x402/schemas.ts';
import type { ExactPayment as Payment, ExactSettleRequest as SettleRequest } from '../../x402/schemes/exact/schemas.ts';
import { stack } from './stack.ts';
import { callAt, parseJson } from './http.ts';

export const CHAIN_ID = 8453;

export function domain() {
  return { name: 'USD Coin', version: '2', chainId: CHAIN_ID, verifyingContract: stack().infra.tokenAddress };
}

/** A fresh payer holding `usdc` test units (and no ETH: payers never pay gas). */
export async function newPayer(usdc = 10_000_000n): Promise<Wallet> {
  return newWallet({ usdc });
}

/** A new key on the stack's chain, given ETH (1, for gas) and dev USDC as asked; connected to `provider` when given. */
export async function newWallet(opts: { eth?: boolean; usdc?: bigint }, provider?: JsonRpcProvider): Promise<Wallet> {
  const wallet = new Wallet(hexlify(randomBytes(32)), provider);
  const usdc = opts.usdc && opts.usdc > 0n ? opts.usdc : undefined;
  if (opts.eth || usdc)
    await fund(stack().infra.chainRpcUrl, stack().infra.tokenAddress, wallet.address, {
      eth: opts.eth ? parseEther('1') : undefined,
      usdc,
    });
  return wallet;
}

/** An unmodified x402 v2 client (@x402/core with @x402/evm's `exact` scheme) paying as `payer`, the local token allowed. */
export function v2PayerClient(payer: Wallet): x402Client {
  const client = new x402Client().register(
    'eip155:*',
    new ExactEvmScheme(privateKeyToAccount(payer.privateKey as `0x${string}`)),
  );
  client.setSpendControls({ allowedAssets: [{ network: `eip155:${CHAIN_ID}`, asset: stack().infra.tokenAddress }] });
  return client;
}

export function newPayTo(): string {
  return new Wallet(hexlify(randomBytes(32))).address;
}

export async function signPayment(
  payer: Wallet,
  terms: { payTo: string; value: bigint | string; validAfter?: number; validBefore?: number; nonce?: string },
): Promise<Payment> {
  const now = Math.floor(Date.now() / 1000);
  const authorization = {
    from: payer.address,
    to: getAddress(terms.payTo),
    value: String(terms.value),
    validAfter: String(terms.validAfter ?? now - 600),
    validBefore: String(terms.validBefore ?? now + 60),
    nonce: terms.nonce ?? hexlify(randomBytes(32)),
  };
  const signature = await payer.signTypedData(domain(), TRANSFER_WITH_AUTHORIZATION_TYPES, authorization);
  return { x402Version: 1, scheme: 'exact', network: 'base', payload: { signature, authorization } };
}

export function requirements(
  payTo: string,
  maxAmountRequired: bigint | string,
  overrides: Partial<PaymentRequirements> = {},
): PaymentRequirements {
  return {
    scheme: 'exact',
    network: 'base',
    maxAmountRequired: String(maxAmountRequired),
    resource: 'https://gateway.test/v1/proxy/agt_x',
    description: 'test',
    mimeType: 'application/json',
    payTo: getAddress(payTo),
    maxTimeoutSeconds: 60,
    asset: stack().infra.tokenAddress,
    extra: { name: 'USD Coin', version: '2' },
    ...overrides,
  };
}

export function settleBody(payment: Payment, reqs: PaymentRequirements): SettleRequest {
  return { x402Version: 1, paymentPayload: payment, paymentRequirements: reqs };
}

export function encodePayment(payment: Payment): string {
  return Buffer.from(JSON.stringify(payment)).toString('base64');
}

let ca: CertAndKeyPem | undefined;
export async function devCa(): Promise<CertAndKeyPem> {
  const files = stack().infra.pki.files;
  ca ??= { certPem: await readFile(files.ca, 'utf8'), keyPem: await readFile(files.caKey, 'utf8') };
  return ca;
}

export type TestAccount = { account: Account; cert: CertAndKeyPem; client: FacilitatorTlsClient };

/** A facilitator account with its own fresh client certificate. */
export async function newAccount(
  name: string,
  opts: { kinds?: AccountKind[]; maxPerTx?: bigint | null; dailyCeiling?: bigint | null } = {},
): Promise<TestAccount> {
  const cert = await issueClientCert(await devCa(), name);
  const account = await addAccount(stack().facilitator.pool, {
    name,
    certPem: cert.certPem,
    allowedKinds: opts.kinds ?? [{ network: 'base', asset: stack().infra.tokenAddress }],
    maxPerTx: opts.maxPerTx ?? null,
    dailyCeiling: opts.dailyCeiling ?? null,
  });
  return { account, cert, client: await facilitatorClient(cert) };
}

type FacilitatorReply = { status: number; json: any; headers: Record<string, string | string[] | undefined> };

export type FacilitatorTlsClient = {
  get(path: string, baseUrl?: string): Promise<FacilitatorReply>;
  post(path: string, body: unknown, baseUrl?: string): Promise<FacilitatorReply>;
  close(): Promise<void>;
};

export async function facilitatorClient(cert?: CertAndKeyPem): Promise<FacilitatorTlsClient> {
  const caPem = (await devCa()).certPem;
  const agent = new Agent({
    connect: { ca: caPem, ...(cert ? { cert: cert.certPem, key: cert.keyPem } : {}) },
    connections: 128,
  });
  async function send(method: 'GET' | 'POST', url: string, body?: unknown): Promise<FacilitatorReply> {
    const res = await request(url, {
      method,
      dispatcher: agent,
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    return { status: res.statusCode, json: parseJson(await res.body.text()), headers: res.headers };
  }
  return {
    get: (path, baseUrl = stack().facilitator.url) => send('GET', `${baseUrl}${path}`),
    post: (path, body, baseUrl = stack().facilitator.url) => send('POST', `${baseUrl}${path}`, body),
    close: () => agent.close(),
  };
}

export function chainProvider(): JsonRpcProvider {
  return new JsonRpcProvider(stack().infra.chainRpcUrl, CHAIN_ID, {
    staticNetwork: true,
    cacheTimeout: -1,
    batchMaxCount: 1,
  });
}

export async function balanceOf(provider: JsonRpcProvider, account: string): Promise<bigint> {
  return tokenContract(stack().infra.tokenAddress, provider).balanceOf(account) as Promise<bigint>;
}

/** Transfer events of the token to `payTo` (one per collected payment). */
export async function transfersTo(
  provider: JsonRpcProvider,
  payTo: string,
): Promise<Array<{ hash: string; value: bigint }>> {
  const token = tokenContract(stack().infra.tokenAddress, provider);
  const events = await token.queryFilter(token.filters.Transfer(null, payTo), 0, 'latest');
  return events.map((e) => ({
    hash: e.transactionHash,
    value: (e as unknown as { args: { value: bigint } }).args.value,
  }));
}

/**
 * A tenant with settlement configured: its facilitator credential holds `account`'s client
 * certificate and key, and its settlement configuration names the stack's facilitator (made
 * through the stack's API, or the one at `api`). Returns the tenant's bearer token.
 */
/** A managed credential of the tenant holding the account's client certificate and key: its id. */
export async function facilitatorCredential(
  token: string,
  account: Pick<TestAccount, 'cert'>,
  api = stack().apiUrl,
  name = 'facilitator-client',
): Promise<string> {
  const bundle = `${account.cert.certPem}\n${account.cert.keyPem}`;
  const credential = await callAt(api, 'POST', '/v1/credentials', {
    token,
    json: { name, auth_type: 'none', source: 'managed', plaintext: bundle },
  });
  if (credential.status !== 201) throw new Error(`credential: ${credential.status} ${credential.text}`);
  return credential.json.id as string;
}

export async function settlingTenant(
  tenant: string,
  account: Pick<TestAccount, 'cert'>,
  facilitatorUrl = stack().facilitator.url,
  api = stack().apiUrl,
): Promise<string> {
  const token = await stack().token(tenant);
  const credentialRef = await facilitatorCredential(token, account, api);
  const config = await callAt(api, 'PUT', '/v1/settlement/config', {
    token,
    json: { facilitator_url: facilitatorUrl, facilitator_credential_ref: credentialRef },
  });
  if (config.status !== 201) throw new Error(`settlement config: ${config.status} ${config.text}`);
  return token;
}
