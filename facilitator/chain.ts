// The facilitator's view of the chain: the token's EIP-3009 entry points, the simulation of
// a transfer before it is signed, and transaction receipts. A revert is a business answer
// (decoded from the token's custom errors); anything else from the RPC is an outage and is
// thrown, for the activity's retry policy to handle.
import { Interface, JsonRpcProvider, Signature, keccak256, toQuantity, zeroPadValue } from 'ethers';
import { LRUCache } from 'lru-cache';
import { TOKEN_ABI } from '../contracts/token.ts';
import type { TransferAuthorization } from '../x402/schemes/exact/schemas.ts';
import type { SignerKind } from '../x402/schemes/exact/verify.ts';
import { isRevert } from '../x402/erc1271.ts';

export const tokenInterface = new Interface(TOKEN_ABI);

export function createChainProvider(rpcUrl: string, chainId: number): JsonRpcProvider {
  // staticNetwork: no network detection; cacheTimeout -1: no stale nonce or block reads;
  // batchMaxCount 1: no 10 ms batching stall on every call.
  return new JsonRpcProvider(rpcUrl, chainId, { staticNetwork: true, cacheTimeout: -1, batchMaxCount: 1 });
}

let rpcId = 0;

type RpcPayload = { method: string; params: unknown[]; id: number; jsonrpc: '2.0' };
type RpcAnswer = { id?: unknown; result?: unknown; error?: { code: number; message: string; data?: unknown } };
type QueuedCall = { payload: RpcPayload; resolve(value: unknown): void; reject(err: unknown): void };

/** Reads that may share a request with others; anything else (a send) goes alone. */
const BATCHED_METHODS = new Set([
  'eth_call',
  'eth_getTransactionCount',
  'eth_blockNumber',
  'eth_getTransactionReceipt',
]);
/** Well under the batch limits of hosted nodes (geth's default is 1000, some providers' 10-50). */
const MAX_BATCH = 10;

/** The reads asked in this turn of the event loop, per provider, sent together at its end. */
const queuedReads = new WeakMap<JsonRpcProvider, QueuedCall[]>();
/** Providers whose node answered a batch as one error: every call goes alone from then on. */
const withoutBatches = new WeakSet<JsonRpcProvider>();

/**
 * One JSON-RPC call sent at once. ethers' `provider.send` queues every call and drains the
 * queue on a `setTimeout(0)` (at least 1 ms, even with batching off); on the settlement's
 * critical path (the verification reads, the send) that wait is paid per round, so those calls
 * go straight to the provider's transport. The reads asked before the current microtasks end
 * (the verification's, issued together) go as one JSON-RPC batch, one HTTP request, up to
 * MAX_BATCH; a send always goes alone, so no read waits for a node that holds a sync send.
 * Errors are ethers' own (`getRpcError`: any error of an eth_call is a CALL_EXCEPTION, so
 * `isRevert` tells a revert from the rest).
 */
export function rpcNow<T = unknown>(provider: JsonRpcProvider, method: string, params: unknown[]): Promise<T> {
  const payload: RpcPayload = { method, params, id: ++rpcId, jsonrpc: '2.0' };
  return new Promise<T>((resolve, reject) => {
    const call: QueuedCall = { payload, resolve: resolve as (value: unknown) => void, reject };
    if (!BATCHED_METHODS.has(method) || withoutBatches.has(provider)) return void sendAlone(provider, call);
    let queue = queuedReads.get(provider);
    if (!queue || queue.length >= MAX_BATCH) {
      const batch: QueuedCall[] = (queue = []);
      queuedReads.set(provider, batch);
      queueMicrotask(() => {
        if (queuedReads.get(provider) === batch) queuedReads.delete(provider);
        void sendCalls(provider, batch);
      });
    }
    queue.push(call);
  });
}

/** Settles `call` with the node's `answer`; false when that is no answer to it (missing, null, neither result nor error). */
function settleWith(provider: JsonRpcProvider, call: QueuedCall, answer: unknown): boolean {
  if (!answer || typeof answer !== 'object') return false;
  const { error } = answer as RpcAnswer;
  if (error) {
    try {
      call.reject(provider.getRpcError(call.payload, { id: call.payload.id, error }));
    } catch (err) {
      call.reject(err);
    }
  } else if ('result' in answer) call.resolve((answer as RpcAnswer).result);
  else return false;
  return true;
}

/** One call in a request of its own. */
async function sendAlone(provider: JsonRpcProvider, call: QueuedCall): Promise<void> {
  try {
    const [answer] = (await provider._send(call.payload)) as unknown[];
    if (!settleWith(provider, call, answer))
      call.reject(new Error(`no answer to ${call.payload.method} from the node`));
  } catch (err) {
    call.reject(err);
  }
}

/**
 * The calls in one batch request, each settled by the answer with its id. A batch the node
 * refused as a whole (an HTTP error), or answered without answers to them (one error for the
 * request: it takes no batches, and is asked one call at a time from then on), is asked again
 * call by call, so every call gets its own answer.
 */
async function sendCalls(provider: JsonRpcProvider, calls: QueuedCall[]): Promise<void> {
  if (calls.length === 1) return sendAlone(provider, calls[0]);
  let answers: unknown[];
  try {
    answers = (await provider._send(calls.map((c) => c.payload))) as unknown[];
  } catch {
    return void (await Promise.all(calls.map((c) => sendAlone(provider, c))));
  }
  const byId = new Map(answers.map((answer) => [(answer as RpcAnswer | null)?.id, answer]));
  const unanswered = calls.filter((c) => !settleWith(provider, c, byId.get(c.payload.id)));
  if (!unanswered.length) return;
  withoutBatches.add(provider);
  await Promise.all(unanswered.map((c) => sendAlone(provider, c)));
}

/**
 * Gas limit of a transferWithAuthorization with an EOA signature: about 60-90k on USDC (more
 * when the recipient's balance slot is new), so 150k never runs out and costs nothing extra
 * (gas is charged as used). Contract-wallet signatures run arbitrary checks and are estimated.
 */
export const EOA_TRANSFER_GAS_LIMIT = 150_000n;

/**
 * Calldata of `transferWithAuthorization`: the (v, r, s) overload when the signature recovers
 * the payer (an EOA; present on every USDC version), the `bytes signature` overload when the
 * payer is a contract wallet (the token asks it through ERC-1271, whatever the signature's length).
 * Without `signer` (callers that did not verify), by length, as the x402 reference does: 65
 * bytes is taken for an EOA, which is wrong for a contract wallet that signs with 65 bytes.
 */
function encodeTransferCalldata(a: TransferAuthorization, signature: string, signer?: SignerKind): string {
  const args = [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce] as const;
  if ((signer ?? ((signature.length - 2) / 2 === 65 ? 'eoa' : 'contract')) === 'eoa') {
    const { v, r, s } = Signature.from(signature);
    return tokenInterface.encodeFunctionData(
      'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)',
      [...args, v, r, s],
    );
  }
  return tokenInterface.encodeFunctionData(
    'transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,bytes)',
    [...args, signature],
  );
}

/**
 * Encoding takes about a millisecond here, and one settlement encodes the same transfer to
 * simulate it and to sign it. Kept in the process rather than carried from step to step: the
 * calldata holds the payer's signature, which no step result (a workflow history) may carry.
 */
const calldataMemo = new LRUCache<string, string>({ max: 1_000 });

export function transferCalldata(a: TransferAuthorization, signature: string, signer?: SignerKind): string {
  const key = JSON.stringify([a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, signature, signer ?? null]);
  let data = calldataMemo.get(key);
  if (data === undefined) calldataMemo.set(key, (data = encodeTransferCalldata(a, signature, signer)));
  return data;
}

/**
 * The hash of a signed transaction: the keccak of its serialized bytes, typed (EIP-2718)
 * transactions included. The same as ethers' `Transaction.from(raw).hash`, without parsing the
 * bytes and recovering their signer (about a millisecond here).
 */
export function signedTransactionHash(raw: string): string {
  return keccak256(raw);
}

/**
 * The token's `authorizationState(payer, nonce)` at `block` (a number: as of that block, which a
 * node that does not have it yet refuses with an error rather than answering from its own
 * older head; default the node's latest).
 */
export async function authorizationUsed(
  provider: JsonRpcProvider,
  token: string,
  payer: string,
  nonce: string,
  block: number | 'latest' = 'latest',
): Promise<boolean> {
  const data = tokenInterface.encodeFunctionData('authorizationState', [payer, nonce]);
  const tag = block === 'latest' ? block : toQuantity(block);
  const [used] = tokenInterface.decodeFunctionResult(
    'authorizationState',
    await rpcNow<string>(provider, 'eth_call', [{ to: token, data }, tag]),
  );
  return used as boolean;
}

/** How far back the log of a payer's authorization is looked for (about two days of Base blocks), in chunks nodes accept. */
export const AUTHORIZATION_LOG_BLOCKS = 100_000;
export const LOG_CHUNK_BLOCKS = 2_000;
const same = (a: string | undefined, b: string) => a?.toLowerCase() === b.toLowerCase();

/** What became of an authorization: unused, or used, and then whether that use paid this settlement (`paid`: its transaction). */
export type AuthorizationUse = { used: false } | { used: true; paid: { txHash: string; blockNumber: number } | null };

/**
 * Whether the payer's authorization was used, by whom and for what, as of `toBlock`: the
 * state is read at that very block and the logs are looked for up to it, so the two always
 * speak of the same chain (a use after `toBlock` is neither seen nor looked for). A used
 * authorization pays this settlement only when its AuthorizationUsed log is followed, in the
 * same call, by the token's Transfer of exactly `amount` from the payer to `payTo` (the token
 * emits the two together, OpenZeppelin's ERC3009 and FiatToken alike). The payer may have
 * used the nonce for another authorization (another recipient or amount) or cancelled it:
 * then nothing was collected for this settlement (`paid: null`), whatever the nonce's state
 * says. Whatever the node cannot tell yet is thrown, never answered (the step retries): a node
 * without `toBlock` (behind the one that reported it), a used authorization whose log is not
 * found within the window, a log whose transaction has no receipt (a load-balanced RPC whose
 * log index is ahead of its receipts).
 */
export async function authorizationUse(
  provider: JsonRpcProvider,
  token: string,
  settlement: { payer: string; nonce: string; payTo: string; amount: bigint },
  toBlock: number,
): Promise<AuthorizationUse> {
  if (!(await authorizationUsed(provider, token, settlement.payer, settlement.nonce, toBlock))) return { used: false };
  const used = tokenInterface.getEvent('AuthorizationUsed')!.topicHash;
  const canceled = tokenInterface.getEvent('AuthorizationCanceled')!.topicHash;
  const payer = zeroPadValue(settlement.payer, 32);
  for (let to = toBlock; to >= 0 && toBlock - to < AUTHORIZATION_LOG_BLOCKS; to -= LOG_CHUNK_BLOCKS) {
    const logs = await provider.getLogs({
      address: token,
      topics: [[used, canceled], payer, settlement.nonce],
      fromBlock: Math.max(to - LOG_CHUNK_BLOCKS + 1, 0),
      toBlock: to,
    });
    const log = logs[logs.length - 1];
    if (!log) continue;
    if (!same(log.topics[0], used)) return { used: true, paid: null };
    const receipt = await provider.getTransactionReceipt(log.transactionHash);
    // Not "not paid": a node that has the log but not yet its receipt knows nothing either way.
    if (!receipt) throw new Error('the transaction that used the authorization has no receipt yet');
    const transfer = receipt.logs.find((l) => l.index === log.index + 1);
    const paid =
      !!transfer &&
      same(transfer.address, token) &&
      same(transfer.topics[0], tokenInterface.getEvent('Transfer')!.topicHash) &&
      same(transfer.topics[1], payer) &&
      same(transfer.topics[2], zeroPadValue(settlement.payTo, 32)) &&
      BigInt(transfer.data) === settlement.amount;
    return { used: true, paid: paid ? { txHash: log.transactionHash, blockNumber: log.blockNumber } : null };
  }
  throw new Error('authorization used but its log was not found');
}

// Real USDC (FiatToken) reverts with strings rather than custom errors; for the operator's
// record only (callers never see a cause), map the ones a payment can hit.
const FIAT_TOKEN_REASONS: Array<[RegExp, string]> = [
  [/exceeds balance/i, 'insufficient_balance'],
  [/authorization is used or canceled/i, 'nonce_used'],
  [/authorization is expired/i, 'expired'],
  [/authorization is not yet valid/i, 'not_yet_valid'],
  [/invalid signature/i, 'invalid_signature'],
];

/** Why a simulated or mined transfer would not move the money, from the token's custom error. */
export function revertCause(errorName: string | null, reason?: string | null): string {
  if (errorName === 'Error' && reason) {
    for (const [pattern, cause] of FIAT_TOKEN_REASONS) if (pattern.test(reason)) return cause;
  }
  switch (errorName) {
    case 'ERC3009UsedAuthorization':
      return 'nonce_used';
    case 'ERC20InsufficientBalance':
      return 'insufficient_balance';
    case 'ERC3009InvalidAuthorizationTime':
      return 'expired';
    case 'ERC3009InvalidSignature':
    case 'ECDSAInvalidSignature':
    case 'ECDSAInvalidSignatureS':
      return 'invalid_signature';
    default:
      return errorName ? `reverted_${errorName}` : 'reverted';
  }
}

/** The name of the error `data` encodes among `errors`' (null when it is none of them). */
export function revertErrorName(errors: Interface, data: string | null | undefined): string | null {
  try {
    return data ? (errors.parseError(data)?.name ?? null) : null;
  } catch {
    return null;
  }
}

function decodeError(data: string | null | undefined): { name: string | null; reason: string | null } {
  if (!data) return { name: null, reason: null };
  try {
    const parsed = tokenInterface.parseError(data);
    return { name: parsed?.name ?? null, reason: parsed?.name === 'Error' ? String(parsed.args[0]) : null };
  } catch {
    return { name: null, reason: null };
  }
}

/** Why a transfer would not move the money, from the token's revert data. */
function tokenRevertCause(data: string | null | undefined): string {
  const decoded = decodeError(data);
  return revertCause(decoded.name, decoded.reason);
}

/**
 * eth_call of the exact transaction the gas wallet would send. Null when it would succeed;
 * the cause when it would revert (`causeOf` reads it from the revert data: the token's errors by
 * default). RPC failures are thrown.
 */
export async function simulate(
  provider: JsonRpcProvider,
  tx: { from: string; to: string; data: string },
  causeOf: (data: string | null | undefined) => string = tokenRevertCause,
): Promise<string | null> {
  try {
    await rpcNow(provider, 'eth_call', [tx, 'latest']);
    return null;
  } catch (err) {
    // Only a revert is the contract's answer; any other error (a rate limit) is thrown, to be retried.
    if (!isRevert(err)) throw err;
    return causeOf(err.data);
  }
}

/** The account's transaction count including the node's pending ones. */
export async function pendingNonce(provider: JsonRpcProvider, address: string): Promise<number> {
  return Number(await rpcNow<string>(provider, 'eth_getTransactionCount', [address, 'pending']));
}

/** Sends raw bytes; true when the node accepted them or already has this very transaction. */
export async function sendRaw(provider: JsonRpcProvider, raw: string, hash: string): Promise<void> {
  try {
    await provider.send('eth_sendRawTransaction', [raw]);
  } catch (err) {
    // A re-send of bytes the node already holds, or that are already mined, is not a failure.
    if (
      await provider.getTransaction(hash).then(
        (tx) => tx !== null,
        () => false,
      )
    )
      return;
    throw err;
  }
}
