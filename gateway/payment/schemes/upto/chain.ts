// What the gate asks the chain of an `upto` payment before the call, as the x402 upto spec asks
// of a verifier: whether the Permit2 nonce is still unused (`nonceBitmap`), and the payer's token
// balance and allowance to Permit2. Plain eth_calls to the configured node with a deadline; any
// failure (node down, slow, a revert) is thrown, and the gate fails closed.
import { Interface } from 'ethers';
import { PERMIT2_ABI, PERMIT2_ADDRESS, nonceUsed } from '../../../../contracts/permit2.ts';
import { TOKEN_ABI } from '../../../../contracts/token.ts';
import { rpcEthCall } from '../../../../x402/erc1271.ts';

const permit2 = new Interface(PERMIT2_ABI);
const token = new Interface(TOKEN_ABI);

export type PayerState = { nonceUsed: boolean; balance: bigint; allowance: bigint };

/** The payer's Permit2 nonce state, token balance and allowance to Permit2, read at the latest block. */
export async function payerState(
  rpc: { rpcUrl: string; timeoutMs: number },
  asset: string,
  payer: string,
  nonce: bigint,
): Promise<PayerState> {
  const call = rpcEthCall(rpc.rpcUrl, rpc.timeoutMs);
  const read = async (iface: Interface, to: string, fn: string, args: unknown[]): Promise<bigint> => {
    const data = await call({ to, data: iface.encodeFunctionData(fn, args) });
    return iface.decodeFunctionResult(fn, data)[0] as bigint;
  };
  const [word, balance, allowance] = await Promise.all([
    read(permit2, PERMIT2_ADDRESS, 'nonceBitmap', [payer, nonce >> 8n]),
    read(token, asset, 'balanceOf', [payer]),
    read(token, asset, 'allowance', [payer, PERMIT2_ADDRESS]),
  ]);
  return { nonceUsed: nonceUsed(word, nonce), balance, allowance };
}
