// The payment gate's settings, read from the environment (like the other config modules):
//   TOKEN_ADDRESS            the USDC contract payments are made in (default: USDC on Base)
//   CHAIN_ID                 8453 (Base); part of the EIP-712 domain payers sign
//   TOKEN_NAME, TOKEN_VERSION  the token's EIP-712 domain ("USD Coin", "2" for USDC on Base)
//   X402_MAX_TIMEOUT_SECONDS maxTimeoutSeconds of the challenge (clients set validBefore from it)
//   X402_VALIDITY_MARGIN_S   validBefore must be at least this far ahead when a payment arrives
//   SETTLEMENT_CA_FILE       CA bundle trusted for facilitator server certificates (default: system roots)
//   SETTLEMENT_TIMEOUT_MS    deadline of one /settle call to the facilitator
//   CHAIN_RPC_URL            the node asked whether a contract-wallet payer accepts its signature (ERC-1271)
//   X402_CONTRACT_SIGNATURE_TIMEOUT_MS  deadline of that eth_call (past it: the coarse 402)
//   X402_UPTO_TIMEOUT_SECONDS  maxTimeoutSeconds of an `upto` entry: the payer's Permit2 deadline
//                            is that far ahead, since its charge is settled after the call
//   X402_UPTO_MIN_WINDOW_S   an `upto` payment whose deadline is nearer than this is refused: the
//                            call and its settle must fit before it
//   CHARGE_TENANT_CONCURRENCY  charges of one tenant a gateway worker asks facilitators about at once
//                            (gateway/payment/charges.ts): a tenant with many charges, or a slow
//                            facilitator, takes no more of the worker than that
import { getAddress } from 'ethers';
import { z } from 'zod';
import { parseEnv, readSettingFile } from '../../lib/config.ts';
import type { TokenDomain } from '../../x402/token.ts';
import { TokenAddressSetting } from '../../x402/schemas.ts';

const BASE_MAINNET_USDC = '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913';

const PaymentEnv = z.object({
  TOKEN_ADDRESS: TokenAddressSetting.default(BASE_MAINNET_USDC),
  CHAIN_ID: z.coerce.number().int().positive().default(8453),
  TOKEN_NAME: z.string().default('USD Coin'),
  TOKEN_VERSION: z.string().default('2'),
  X402_MAX_TIMEOUT_SECONDS: z.coerce.number().int().min(10).max(3600).default(60),
  X402_VALIDITY_MARGIN_S: z.coerce.number().int().nonnegative().default(6),
  // How long a payment settled for a call that was then not accepted (a crash, an outage) can
  // still buy that call with the same header, whatever its validBefore says.
  X402_SETTLED_RESUME_HOURS: z.coerce.number().positive().default(24),
  SETTLEMENT_CA_FILE: z.string().optional(),
  SETTLEMENT_TIMEOUT_MS: z.coerce.number().int().positive().default(30_000),
  CHAIN_RPC_URL: z.string().default('http://127.0.0.1:8545'),
  // At most 10 s: a batch-settlement deposit's channel is read with it after its deposit landed,
  // within what the call's channel lease keeps for that (channels/store.ts).
  X402_CONTRACT_SIGNATURE_TIMEOUT_MS: z.coerce.number().int().positive().max(10_000).default(3_000),
  X402_UPTO_TIMEOUT_SECONDS: z.coerce.number().int().min(120).max(86_400).default(3_600),
  X402_UPTO_MIN_WINDOW_S: z.coerce.number().int().min(60).max(86_400).default(900),
  CHARGE_TENANT_CONCURRENCY: z.coerce.number().int().min(1).max(1_000).default(8),
  CHANNEL_HOLD_IDLE_MS: z.coerce.number().int().min(0).max(60_000).default(2_000),
});

export type PaymentConfig = {
  network: 'base';
  domain: TokenDomain;
  maxTimeoutSeconds: number;
  validityMarginSeconds: number;
  /** PEM of the CA(s) trusted for the facilitator's server certificate; undefined: system roots. */
  settlementCaPem: string | undefined;
  settlementTimeoutMs: number;
  /** X402_SETTLED_RESUME_HOURS, in ms: the settled-claim resume window, and the payment identifiers' (identifier.ts). */
  settledResumeMs: number;
  /** ERC-1271 checks of contract-wallet payers: the node and the deadline of one eth_call. */
  contractSignatures: { rpcUrl: string; timeoutMs: number };
  /**
   * A payment charged after its call (`upto`): its entry's maxTimeoutSeconds, and the least time
   * its deadline must leave when it arrives (the call, then its settle, happen before it).
   */
  chargedAfterCall: { timeoutSeconds: number; minWindowSeconds: number };
  /** CHARGE_TENANT_CONCURRENCY: one tenant's charge settles a worker runs at once. */
  chargeTenantConcurrency: number;
  /**
   * CHANNEL_HOLD_IDLE_MS: how long an API process keeps a payment channel it served a voucher
   * from, unused, before letting it go (channels/owners.ts); 0: never kept between calls.
   */
  channelHoldIdleMs: number;
};

export function loadPaymentConfig(env: NodeJS.ProcessEnv = process.env): PaymentConfig {
  const e = parseEnv(PaymentEnv, env);
  const settlementCaPem = e.SETTLEMENT_CA_FILE
    ? readSettingFile('SETTLEMENT_CA_FILE', e.SETTLEMENT_CA_FILE).toString('utf8')
    : undefined;
  return {
    network: 'base',
    domain: {
      name: e.TOKEN_NAME,
      version: e.TOKEN_VERSION,
      chainId: e.CHAIN_ID,
      verifyingContract: getAddress(e.TOKEN_ADDRESS),
    },
    maxTimeoutSeconds: e.X402_MAX_TIMEOUT_SECONDS,
    validityMarginSeconds: e.X402_VALIDITY_MARGIN_S,
    settlementCaPem,
    settlementTimeoutMs: e.SETTLEMENT_TIMEOUT_MS,
    settledResumeMs: e.X402_SETTLED_RESUME_HOURS * 3_600_000,
    contractSignatures: { rpcUrl: e.CHAIN_RPC_URL, timeoutMs: e.X402_CONTRACT_SIGNATURE_TIMEOUT_MS },
    chargedAfterCall: {
      // The window never exceeds what the entry lets a payer sign.
      timeoutSeconds: Math.max(e.X402_UPTO_TIMEOUT_SECONDS, e.X402_UPTO_MIN_WINDOW_S + 60),
      minWindowSeconds: e.X402_UPTO_MIN_WINDOW_S,
    },
    chargeTenantConcurrency: e.CHARGE_TENANT_CONCURRENCY,
    channelHoldIdleMs: e.CHANNEL_HOLD_IDLE_MS,
  };
}
