// EIP-1559 fees for the gas wallet's transactions, read from the node at most once per
// `maxAgeMs` (about a block): every settlement in that window signs with the same fees, and
// the verification round saves three RPC calls. maxFeePerGas from the node (2 × base fee +
// tip) leaves room for the base fee to rise over the next blocks.
import type { JsonRpcProvider } from 'ethers';

export type Fees = { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint };

export type FeeOracle = { current(): Promise<Fees> };

export function createFeeOracle(provider: JsonRpcProvider, maxAgeMs = 1_000): FeeOracle {
  let cached: { fees: Fees; at: number } | undefined;
  let inFlight: Promise<Fees> | undefined;
  return {
    async current() {
      if (cached && Date.now() - cached.at < maxAgeMs) return cached.fees;
      inFlight ??= provider
        .getFeeData()
        .then((data) => {
          const fees = {
            maxFeePerGas: data.maxFeePerGas ?? (data.gasPrice ?? 0n) * 2n,
            maxPriorityFeePerGas: data.maxPriorityFeePerGas ?? 1_000_000n,
          };
          cached = { fees, at: Date.now() };
          return fees;
        })
        .finally(() => {
          inFlight = undefined;
        });
      return inFlight;
    },
  };
}
