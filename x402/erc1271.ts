// ERC-1271: a payer that is a contract (a smart-contract wallet) signs by answering
// `isValidSignature(digest, signature)` with the magic value 0x1626ba7e. The EIP-3009 token's
// `bytes signature` overload asks exactly that (OpenZeppelin SignatureChecker, as FiatToken
// v2.2 does), so the gateway and the facilitator ask the same question with an eth_call before
// they accept or submit such a payment.
// A definite answer is true (accepted) or false (refused, reverted, no contract, garbage); a
// transport failure (node down, deadline) is thrown, for each caller to decide: the gateway
// fails closed (402), the facilitator's handler answers 503, its worker retries.
import { Interface, isError, type CallExceptionError } from 'ethers';

const ERC1271 = new Interface([
  'function isValidSignature(bytes32 hash, bytes signature) view returns (bytes4 magicValue)',
]);
// What SignatureChecker accepts: the selector left-aligned in one 32-byte word.
const MAGIC_WORD = `0x1626ba7e${'0'.repeat(56)}`;

/** An eth_call at the latest block: the returned data, or a thrown error. */
export type EthCall = (tx: { to: string; data: string }) => Promise<string>;

/** Asks `signer` whether it accepts `signature` over `digest` (ERC-1271). */
export type ContractSignatureCheck = (signer: string, digest: string, signature: string) => Promise<boolean>;

/** A revert of the call: a refusal, not an outage. */
class CallReverted extends Error {}

/** Whether a JSON-RPC error reports a revert: geth and anvil say code 3 ("execution reverted"), some nodes only in the message. */
function reportsRevert(error: { code?: number; message?: string }): boolean {
  return error.code === 3 || /revert/i.test(error.message ?? '');
}

/**
 * Whether an ethers error is a revert of the call. ethers makes a CALL_EXCEPTION of any error
 * an eth_call gets (a rate limit, a node behind), so the node's own error decides.
 */
export function isRevert(err: unknown): err is CallExceptionError {
  if (!isError(err, 'CALL_EXCEPTION')) return false;
  const raw = (err.info as { error?: { code?: number; message?: string } } | undefined)?.error;
  return err.data != null || raw === undefined || reportsRevert(raw);
}

export function contractSignatureCheck(call: EthCall): ContractSignatureCheck {
  return async (signer, digest, signature) => {
    let result: string;
    try {
      result = await call({ to: signer, data: ERC1271.encodeFunctionData('isValidSignature', [digest, signature]) });
    } catch (err) {
      if (err instanceof CallReverted || isRevert(err)) return false;
      throw err;
    }
    // An address without code answers "0x"; a contract without the function reverts or answers
    // something else. Only the magic word (extra return data is tolerated, as SignatureChecker does) counts.
    return result.length >= 66 && result.slice(0, 66).toLowerCase() === MAGIC_WORD;
  };
}

/**
 * eth_call over plain JSON-RPC with a hard deadline (the gateway's request path must not wait on
 * a slow node). A JSON-RPC error that reports a revert is a refusal; anything else is thrown.
 */
export function rpcEthCall(rpcUrl: string, timeoutMs: number): EthCall {
  return async (tx) => {
    const res = await fetch(rpcUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_call', params: [tx, 'latest'] }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    if (!res.ok) throw new Error(`rpc answered HTTP ${res.status}`);
    const body = (await res.json()) as { result?: unknown; error?: { code?: number; message?: string } };
    if (body.error) {
      if (reportsRevert(body.error)) throw new CallReverted();
      throw new Error(`rpc error ${body.error.code ?? ''}`);
    }
    if (typeof body.result !== 'string' || !/^0x[0-9a-fA-F]*$/.test(body.result))
      throw new Error('rpc answered no data');
    return body.result;
  };
}

/** The facilitator handler's deadline for that eth_call (past it: 503, retry). */
export const CONTRACT_SIGNATURE_TIMEOUT_MS = 3_000;

const byEndpoint = new Map<string, ContractSignatureCheck>();

/** One checker per (RPC endpoint, deadline), shared by every request of a process. */
export function contractSignatureCheckFor(rpcUrl: string, timeoutMs: number): ContractSignatureCheck {
  const key = `${rpcUrl} ${timeoutMs}`;
  let check = byEndpoint.get(key);
  if (!check) {
    check = contractSignatureCheck(rpcEthCall(rpcUrl, timeoutMs));
    byEndpoint.set(key, check);
  }
  return check;
}
