// The local chain: an anvil node serving chain id 8453 (Base) with the USDC stand-in deployed,
// so payments are signed and settled exactly as on Base, only against a node on this machine.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdir } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { createInterface } from 'node:readline';
import { ContractFactory, JsonRpcProvider, getCreateAddress, toQuantity } from 'ethers';
import {
  BATCH_SETTLEMENT_ADDRESS,
  ERC3009_DEPOSIT_COLLECTOR_ADDRESS,
  MULTICALL3_ADDRESS,
} from '../../contracts/batch-settlement.ts';
import { PERMIT2_ADDRESS } from '../../contracts/permit2.ts';
import { CHAIN_ID, TOKEN_ABI, tokenContract } from '../../contracts/token.ts';
import { UPTO_PROXY_ADDRESS } from '../../contracts/upto-proxy.ts';

export { CHAIN_ID, TOKEN_ABI, tokenContract };
import { compileContract, compileToken, type ContractName } from './compile.ts';

/**
 * PUBLIC TEST KEYS, known to everyone: anvil's default accounts, derived from the mnemonic
 * "test test test test test test test test test test test junk" at m/44'/60'/0'/0/{0..4}.
 * Anvil funds them with 10000 ETH each. Never use them anywhere but a local chain: anything sent
 * to these addresses on a real network is taken within seconds.
 * Account 0 deploys the token and is its only minter.
 */
export const DEV_ACCOUNTS = [
  {
    address: '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266',
    privateKey: '0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80',
  },
  {
    address: '0x70997970C51812dc3A010C7d01b50e0d17dc79C8',
    privateKey: '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d',
  },
  {
    address: '0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC',
    privateKey: '0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a',
  },
  {
    address: '0x90F79bf6EB2c4f870365E785982E1f101E93b906',
    privateKey: '0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6',
  },
  {
    address: '0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65',
    privateKey: '0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a',
  },
] as const;

export interface RunningAnvil {
  rpcUrl: string;
  child: ChildProcess;
  /** Stops anvil gracefully, which is when it writes `stateFile`. */
  stop(): Promise<void>;
}

const READY_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 10_000;

/**
 * Starts anvil on 127.0.0.1:port with automine. With `stateFile`, the chain is loaded from that
 * file if it exists and written back on stop, so the next start keeps balances and the token.
 */
export async function startAnvil(opts: {
  port: number;
  stateFile?: string;
  log?: (line: string) => void;
}): Promise<RunningAnvil> {
  const args = ['--chain-id', String(CHAIN_ID), '--host', '127.0.0.1', '--port', String(opts.port)];
  if (opts.stateFile) {
    await mkdir(dirname(opts.stateFile), { recursive: true });
    args.push('--state', opts.stateFile);
  }
  const anvil = anvilCommand();
  const child = spawn(anvil.file, [...anvil.args, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });

  const lastLines: string[] = []; // kept to explain an early exit in one line
  const listening = new Promise<void>((resolve) => {
    for (const stream of [child.stdout, child.stderr]) {
      createInterface({ input: stream }).on('line', (line) => {
        lastLines.push(line);
        if (lastLines.length > 20) lastLines.shift();
        opts.log?.(line);
        // Printed only once the socket is bound. Waiting for our own anvil to say so, rather than
        // polling the port, means a different process already on that port is never mistaken for it.
        if (line.startsWith('Listening on ')) resolve();
      });
    }
  });
  const failed = new Promise<never>((_, reject) => {
    child.once('error', (err) => reject(new Error(`anvil: cannot run ${anvil.file}: ${err.message}`)));
    // 'close' rather than 'exit': it fires after stderr is drained, so the reason is in lastLines.
    child.once('close', (code, signal) => reject(new Error(explainEarlyExit(opts.port, code, signal, lastLines))));
  });
  let readyTimer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<never>((_, reject) => {
    const message = `anvil: not listening on port ${opts.port} after ${READY_TIMEOUT_MS} ms`;
    readyTimer = setTimeout(() => reject(new Error(message)), READY_TIMEOUT_MS);
  });
  failed.catch(() => {}); // after a successful start a later exit is the owner's business, not a rejection

  const rpcUrl = `http://127.0.0.1:${opts.port}`;
  try {
    await Promise.race([listening, failed, timedOut]);
    const chainId = await withProvider(rpcUrl, (provider) => provider.send('eth_chainId', []));
    if (Number(chainId) !== CHAIN_ID) throw new Error(`anvil: answers chain id ${chainId}, expected ${CHAIN_ID}`);
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  } finally {
    clearTimeout(readyTimer);
  }
  return { rpcUrl, child, stop: () => stopChild(child) };
}

/** Where `npm start` deploys the token: dev account 0's first contract, the same on every fresh chain. */
export const DEV_TOKEN_ADDRESS = getCreateAddress({ from: DEV_ACCOUNTS[0].address, nonce: 0 });

/** The local chain `npm start` runs: CHAIN_RPC_URL, else anvil on ANVIL_PORT (default 8545). */
export function devChainRpcUrl(env: NodeJS.ProcessEnv = process.env): string {
  return env.CHAIN_RPC_URL || `http://127.0.0.1:${env.ANVIL_PORT || 8545}`;
}

/**
 * Deploys the token from dev account 0 unless it is already there. The first contract an account
 * creates always lands at the same address, so every fresh chain gets the token at one known
 * address, and a chain restored from a state file is recognised by finding code there.
 */
export async function deployToken(rpcUrl: string, cacheDir: string): Promise<{ address: string; deployer: string }> {
  const deployer = DEV_ACCOUNTS[0].address;
  const address = DEV_TOKEN_ADDRESS;
  await withProvider(rpcUrl, async (provider) => {
    if ((await provider.getCode(address)) !== '0x') return;
    const sent = await provider.getTransactionCount(deployer);
    if (sent !== 0) {
      throw new Error(
        `cannot deploy the token at ${address}: ${deployer} has already sent ${sent} transaction(s) on this chain ` +
          'without creating it there (was the state file made by something else? delete it for a fresh chain)',
      );
    }
    const { abi, bytecode } = await compileToken(cacheDir);
    const token = await new ContractFactory(abi, bytecode, await devSigner(provider)).deploy();
    await token.waitForDeployment();
  });
  return { address, deployer };
}

/**
 * Places the contracts the x402 `upto` scheme settles through at their canonical addresses:
 * Permit2's signature transfer and the upto proxy (our implementations of the published
 * interfaces, contracts/Permit2.sol and contracts/UptoPermit2Proxy.sol). The addresses are fixed
 * by the reference clients, so the code is set there directly (anvil_setCode: no deployment, no
 * constructor; neither contract needs one). Idempotent: code already in place is left alone, so a
 * chain restored from a state file keeps its Permit2 nonces.
 */
export async function placeUptoContracts(rpcUrl: string, cacheDir: string): Promise<void> {
  await placeAtCanonicalAddresses(rpcUrl, cacheDir, [
    { address: PERMIT2_ADDRESS, name: 'Permit2' },
    { address: UPTO_PROXY_ADDRESS, name: 'UptoPermit2Proxy' },
  ]);
}

/**
 * Places the contracts the x402 `batch-settlement` scheme runs on at their canonical addresses:
 * the channel contract and its ERC-3009 deposit collector (our implementations of the published
 * interfaces, contracts/X402BatchSettlement.sol and contracts/ERC3009DepositCollector.sol), and
 * Multicall3's tryAggregate (contracts/Multicall3.sol), through which the reference facilitator
 * reads channel state, as it finds it on Base. None needs a constructor; idempotent like
 * placeUptoContracts, so a restored chain keeps its channels.
 */
export async function placeBatchSettlementContracts(rpcUrl: string, cacheDir: string): Promise<void> {
  await placeAtCanonicalAddresses(rpcUrl, cacheDir, [
    { address: BATCH_SETTLEMENT_ADDRESS, name: 'X402BatchSettlement' },
    { address: ERC3009_DEPOSIT_COLLECTOR_ADDRESS, name: 'ERC3009DepositCollector' },
    { address: MULTICALL3_ADDRESS, name: 'Multicall3' },
  ]);
}

async function placeAtCanonicalAddresses(
  rpcUrl: string,
  cacheDir: string,
  placements: readonly { address: string; name: ContractName }[],
): Promise<void> {
  await withProvider(rpcUrl, async (provider) => {
    for (const { address, name } of placements) {
      const { deployedBytecode } = await compileContract(name, cacheDir);
      if ((await provider.getCode(address)).toLowerCase() === deployedBytecode.toLowerCase()) continue;
      await provider.send('anvil_setCode', [address, deployedBytecode]);
    }
  });
}

/**
 * Deploys a SmartWallet (contracts/SmartWallet.sol: ERC-1271, one owner key) for tests of
 * contract-wallet payments; returns its address. From dev account 0 after the token, so the
 * token's fixed address (account 0's first deploy) is unaffected.
 */
export async function deploySmartWallet(rpcUrl: string, owner: string, cacheDir: string): Promise<string> {
  const { abi, bytecode } = await compileContract('SmartWallet', cacheDir);
  return withProvider(rpcUrl, async (provider) => {
    const wallet = await new ContractFactory(abi, bytecode, await devSigner(provider)).deploy(owner);
    await wallet.waitForDeployment();
    return wallet.getAddress();
  });
}

/**
 * Gives `to` test money: `usdc` (smallest units, 6 decimals) is minted on top of its balance,
 * `eth` (wei) replaces its ETH balance, which is how anvil exposes it.
 */
export async function fund(
  rpcUrl: string,
  token: string,
  to: string,
  amounts: { eth?: bigint; usdc?: bigint },
): Promise<void> {
  await withProvider(rpcUrl, async (provider) => {
    if (amounts.eth !== undefined) await provider.send('anvil_setBalance', [to, toQuantity(amounts.eth)]);
    if (amounts.usdc !== undefined && amounts.usdc > 0n) {
      const minted = await tokenContract(token, await devSigner(provider)).mint(to, amounts.usdc);
      await minted.wait();
    }
  });
}

/**
 * `fund` for a person at the command line, on a chain that must be the local anvil with the dev
 * token (anything else is refused: minting goes through anvil's unlocked dev account 0). Returns
 * the balance after minting.
 */
export async function fundOnDevChain(rpcUrl: string, token: string, to: string, usdc: bigint): Promise<bigint> {
  await withProvider(rpcUrl, async (provider) => {
    let client: string;
    try {
      client = String(await provider.send('web3_clientVersion', []));
    } catch {
      throw new Error(`no chain answers at ${rpcUrl}: is npm start running? (CHAIN_RPC_URL, ANVIL_PORT)`);
    }
    if (!/anvil/i.test(client)) throw new Error(`${rpcUrl} is ${client}, not the local anvil chain: refusing to mint`);
    if ((await provider.getCode(token)) === '0x') throw new Error(`no token contract at ${token} on ${rpcUrl}`);
  });
  await fund(rpcUrl, token, to, { usdc });
  return withProvider(rpcUrl, (provider) => tokenContract(token, provider).balanceOf(to) as Promise<bigint>);
}

async function withProvider<T>(rpcUrl: string, use: (provider: JsonRpcProvider) => Promise<T>): Promise<T> {
  // staticNetwork: the chain id is known, so ethers skips its network detection and retry loop.
  const provider = new JsonRpcProvider(rpcUrl, CHAIN_ID, { staticNetwork: true });
  try {
    return await use(provider);
  } finally {
    provider.destroy();
  }
}

// Dev account 0 through anvil's unlocked-account signing rather than a local Wallet: anvil then
// assigns the transaction nonce itself, so concurrent fund() calls cannot collide on one nonce.
function devSigner(provider: JsonRpcProvider) {
  return provider.getSigner(DEV_ACCOUNTS[0].address);
}

const require = createRequire(import.meta.url);

// The platform package's binary directly, rather than the package's node wrapper (bin.mjs): one
// process instead of two, so stop() signals anvil itself. The wrapper is the fallback.
function anvilCommand(): { file: string; args: string[] } {
  const arch = ({ x64: 'amd64', arm64: 'arm64' } as Record<string, string>)[process.arch] ?? process.arch;
  const binary = process.platform === 'win32' ? 'anvil.exe' : 'anvil';
  const platformPackage = `@foundry-rs/anvil-${process.platform}-${arch}`;
  try {
    return { file: require.resolve(`${platformPackage}/bin/${binary}`), args: [] };
  } catch {
    // not installed for this platform: try the wrapper
  }
  try {
    return { file: process.execPath, args: [require.resolve('@foundry-rs/anvil/bin.mjs')] };
  } catch {
    throw new Error(`anvil: binary not found (neither ${platformPackage} nor @foundry-rs/anvil is installed)`);
  }
}

function explainEarlyExit(
  port: number,
  code: number | null,
  signal: NodeJS.Signals | null,
  lastLines: string[],
): string {
  if (lastLines.some((line) => /address already in use/i.test(line))) {
    return `anvil: port ${port} on 127.0.0.1 is already in use (another anvil or a previous start still running?)`;
  }
  const reason = lastLines.findLast((line) => line.trim() !== '') ?? 'no output';
  return `anvil: exited before it was ready (${signal ?? `code ${code}`}): ${reason}`;
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM'); // anvil handles SIGTERM by dumping --state, then exits
  const forceKill = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
  await exited;
  clearTimeout(forceKill);
}
