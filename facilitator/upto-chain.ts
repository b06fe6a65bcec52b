// The facilitator's view of the chain for `upto` settlements: the upto proxy call that charges a
// payment (its calldata), the reads re-verification makes (the Permit2 nonce, the payer's balance
// and allowance to Permit2), the simulation of the call with its revert decoded from the proxy's,
// Permit2's and the token's errors, and what became of a Permit2 nonce. As in chain.ts, a revert
// is a business answer and anything else from the RPC is thrown, for the step to retry.
import { Interface, JsonRpcProvider, toQuantity, zeroPadValue } from 'ethers';
import { PERMIT2_ABI, PERMIT2_ADDRESS, nonceUsed } from '../contracts/permit2.ts';
import { UPTO_PROXY_ABI, UPTO_PROXY_ADDRESS } from '../contracts/upto-proxy.ts';
import { TOKEN_ABI } from '../contracts/token.ts';
import type { UptoPayment } from '../x402/schemes/upto/schemas.ts';
import { uptoSettleCallOf } from '../x402/schemes/upto/settle-args.ts';
import {
  AUTHORIZATION_LOG_BLOCKS,
  LOG_CHUNK_BLOCKS,
  revertErrorName,
  rpcNow,
  simulate,
  tokenInterface,
  type AuthorizationUse,
} from './chain.ts';

const proxyInterface = new Interface(UPTO_PROXY_ABI);
const permit2Interface = new Interface(PERMIT2_ABI);
/** Every error the call can revert with: the proxy's, Permit2's and the token's. */
const errorsInterface = new Interface(
  [...UPTO_PROXY_ABI, ...PERMIT2_ABI, ...TOKEN_ABI].filter((entry) => entry.startsWith('error ')),
);

/** The proxy call charging `amount` of a verified payment, as the gas wallet sends it. */
export function uptoCalldata(payment: UptoPayment, amount: bigint): string {
  const call = uptoSettleCallOf(payment, amount);
  return proxyInterface.encodeFunctionData(call.method, call.args);
}

async function call(provider: JsonRpcProvider, to: string, data: string, block: string): Promise<string> {
  return rpcNow<string>(provider, 'eth_call', [{ to, data }, block]);
}

/** Whether Permit2 nonce `nonce` of `owner` is used as of `block` (default the node's latest). */
export async function permit2NonceUsed(
  provider: JsonRpcProvider,
  owner: string,
  nonce: bigint,
  block: number | 'latest' = 'latest',
): Promise<boolean> {
  const data = permit2Interface.encodeFunctionData('nonceBitmap', [owner, nonce >> 8n]);
  const tag = block === 'latest' ? block : toQuantity(block);
  const [word] = permit2Interface.decodeFunctionResult('nonceBitmap', await call(provider, PERMIT2_ADDRESS, data, tag));
  return nonceUsed(word as bigint, nonce);
}

/** The payer's token balance and its allowance to Permit2, at the node's latest block. */
export async function payerFunds(
  provider: JsonRpcProvider,
  token: string,
  payer: string,
): Promise<{ balance: bigint; allowance: bigint }> {
  const [balance, allowance] = await Promise.all([
    call(provider, token, tokenInterface.encodeFunctionData('balanceOf', [payer]), 'latest'),
    call(provider, token, tokenInterface.encodeFunctionData('allowance', [payer, PERMIT2_ADDRESS]), 'latest'),
  ]);
  return {
    balance: tokenInterface.decodeFunctionResult('balanceOf', balance)[0] as bigint,
    allowance: tokenInterface.decodeFunctionResult('allowance', allowance)[0] as bigint,
  };
}

/** Why the call would not move the money, from the contracts' errors (for operators only). */
function uptoRevertCause(data: string | null | undefined): string {
  const name = revertErrorName(errorsInterface, data);
  switch (name) {
    case 'InvalidNonce':
      return 'nonce_used';
    case 'ERC20InsufficientBalance':
      return 'insufficient_balance';
    case 'ERC20InsufficientAllowance':
      return 'permit2_allowance_required';
    case 'SignatureExpired':
      return 'expired';
    case 'PaymentTooEarly':
      return 'not_yet_valid';
    case 'AmountExceedsPermitted':
      return 'amount_mismatch';
    case 'UnauthorizedFacilitator':
      return 'facilitator_mismatch';
    case 'InvalidSignature':
    case 'InvalidSigner':
    case 'InvalidContractSignature':
      return 'invalid_signature';
    default:
      return name ? `reverted_${name}` : 'reverted';
  }
}

/** eth_call of the proxy call the gas wallet would send: null when it would succeed, else the cause. */
export function simulateUpto(
  provider: JsonRpcProvider,
  tx: { from: string; to: string; data: string },
): Promise<string | null> {
  return simulate(provider, tx, uptoRevertCause);
}

const same = (a: string | null | undefined, b: string) => a?.toLowerCase() === b.toLowerCase();

/**
 * What became of an upto authorization's Permit2 nonce as of `toBlock`. Used, it paid this
 * settlement only when a transaction of the upto proxy charged this payer under this nonce and
 * moved exactly `amount` to `payTo` (the token's Transfer from the payer to the payee in it). The
 * proxy takes the call only from the facilitator the payer's witness names, so that transaction
 * is one of the gas wallet's; a nonce used otherwise (the payer invalidated it, or spent it with
 * another Permit2 signature) collected nothing for this settlement (`paid: null`). A node
 * without `toBlock` errors, and the step retries.
 */
export async function uptoAuthorizationUse(
  provider: JsonRpcProvider,
  token: string,
  settlement: { payer: string; nonce: bigint; payTo: string; amount: bigint },
  toBlock: number,
): Promise<AuthorizationUse> {
  if (!(await permit2NonceUsed(provider, settlement.payer, settlement.nonce, toBlock))) return { used: false };
  const transfer = tokenInterface.getEvent('Transfer')!.topicHash;
  const topics = [transfer, zeroPadValue(settlement.payer, 32), zeroPadValue(settlement.payTo, 32)];
  for (let to = toBlock; to >= 0 && toBlock - to < AUTHORIZATION_LOG_BLOCKS; to -= LOG_CHUNK_BLOCKS) {
    const logs = await provider.getLogs({
      address: token,
      topics,
      fromBlock: Math.max(to - LOG_CHUNK_BLOCKS + 1, 0),
      toBlock: to,
    });
    for (const log of logs.reverse()) {
      if (BigInt(log.data) !== settlement.amount) continue;
      const tx = await provider.getTransaction(log.transactionHash);
      if (!tx) throw new Error('the transaction of a transfer log is not known to the node yet');
      if (!same(tx.to, UPTO_PROXY_ADDRESS)) continue;
      const parsed = proxyInterface.parseTransaction({ data: tx.data });
      if (!parsed) continue;
      // settle(permit, amount, owner, ...) or settleWithPermit(permit2612, permit, amount, owner, ...).
      const at = parsed.name === 'settleWithPermit' ? 1 : 0;
      const permit = parsed.args[at] as { nonce: bigint };
      const owner = parsed.args[at + 2] as string;
      if (permit.nonce === settlement.nonce && same(owner, settlement.payer))
        return { used: true, paid: { txHash: log.transactionHash, blockNumber: log.blockNumber } };
    }
  }
  return { used: true, paid: null };
}
