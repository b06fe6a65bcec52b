// Compiles the project's contracts (contracts/<Name>.sol, contract <Name>) offline with the
// `solc` npm package (solc-js) and caches each artifact, so only the first start after a source
// or compiler change pays the ~2 s compile.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';

export interface CompiledContract {
  abi: any[];
  /** Creation code: what a deployment sends. */
  bytecode: string;
  /** Runtime code: what anvil_setCode places at a fixed address (no constructor runs). */
  deployedBytecode: string;
}
export type CompiledToken = CompiledContract;

/**
 * The contracts of this folder: the USDC stand-in, an ERC-1271 wallet for tests, the two the
 * x402 `upto` scheme settles through (Permit2's signature transfer and the upto proxy), and the
 * ones of the `batch-settlement` scheme (the channel contract, its ERC-3009 deposit collector and
 * the Multicall3 its reference facilitator reads through), all but the first two placed at their
 * canonical addresses.
 */
export type ContractName =
  | 'UsdcToken'
  | 'SmartWallet'
  | 'Permit2'
  | 'UptoPermit2Proxy'
  | 'X402BatchSettlement'
  | 'ERC3009DepositCollector'
  | 'Multicall3';

const require = createRequire(import.meta.url);

// evmVersion is pinned rather than left to the compiler default so the bytecode (and the cache
// key) does not change under us; anvil's default ("latest") hardfork runs prague code.
function solcSettings(name: ContractName) {
  return {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: 'prague',
    outputSelection: { [`${name}.sol`]: { [name]: ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object'] } },
  };
}

export function compileToken(cacheDir: string): Promise<CompiledToken> {
  return compileContract('UsdcToken', cacheDir);
}

export async function compileContract(name: ContractName, cacheDir: string): Promise<CompiledContract> {
  const source = await readFile(new URL(`../../contracts/${name}.sol`, import.meta.url), 'utf8');
  const cacheFile = join(cacheDir, `${name}-${cacheKey(name, source)}.json`);
  try {
    return JSON.parse(await readFile(cacheFile, 'utf8')) as CompiledContract;
  } catch {
    // Missing or unreadable cache entry: compile below and overwrite it.
  }
  const compiled = await compile(name, source);
  await mkdir(cacheDir, { recursive: true });
  // Write then rename, so a concurrently starting process never reads half a file.
  const partialFile = `${cacheFile}.${process.pid}.tmp`;
  await writeFile(partialFile, JSON.stringify(compiled));
  await rename(partialFile, cacheFile);
  return compiled;
}

// Everything that changes the output: our source, the compiler, the imported OpenZeppelin
// sources (identified by their package version) and the settings.
function cacheKey(name: ContractName, source: string): string {
  const versions = ['solc', '@openzeppelin/contracts'].map(
    (pkg) => `${pkg}@${(require(`${pkg}/package.json`) as { version: string }).version}`,
  );
  return createHash('sha256')
    .update(JSON.stringify([versions, solcSettings(name), source]))
    .digest('hex')
    .slice(0, 16);
}

async function compile(name: ContractName, source: string): Promise<CompiledContract> {
  // Imported lazily: loading solc-js (an 8 MB emscripten build) is itself slow, and a cache hit needs none of it.
  const { default: solc } = await import('solc');
  const input = {
    language: 'Solidity',
    sources: { [`${name}.sol`]: { content: source } },
    settings: solcSettings(name),
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input), { import: readImport }));
  const errors = (output.errors ?? []).filter((e: { severity: string }) => e.severity === 'error');
  if (errors.length > 0) {
    throw new Error(`solc failed:\n${errors.map((e: { formattedMessage: string }) => e.formattedMessage).join('\n')}`);
  }
  const contract = output.contracts[`${name}.sol`][name];
  return {
    abi: contract.abi,
    bytecode: `0x${contract.evm.bytecode.object}`,
    deployedBytecode: `0x${contract.evm.deployedBytecode.object}`,
  };
}

// solc asks for every import by its source unit name ("@openzeppelin/contracts/..."), which is
// also a valid package subpath, so Node's resolver finds it in node_modules with no network.
function readImport(importPath: string): { contents: string } | { error: string } {
  try {
    return { contents: readFileSync(require.resolve(importPath), 'utf8') };
  } catch {
    return { error: `cannot resolve import ${importPath} from node_modules` };
  }
}
