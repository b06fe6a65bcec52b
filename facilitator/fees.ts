// EIP-1559 fees for the gas wallet's transactions, read from the node at most once per
// `maxAgeMs` (about a block): every settlement in that window signs with the same fees, and
// the verification round saves three RPC calls. maxFeePerGas from the node (2 × base fee +
// tip) leaves room for the base fee to rise over the next blocks. Fees older than `maxAgeMs`
// are still served (refreshed in the background) up to `staleMs`, so a settlement never waits
// for a fee read while a recent one exists.
import type { JsonRpcProvider } from 'ethers';

type Fees = { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint };

export type FeeOracle = { current(): Promise<Fees> };

export function createFeeOracle(provider: JsonRpcProvider, maxAgeMs = 1_000, staleMs = 12_000): FeeOracle {
  let cached: { fees: Fees; at: number } | undefined;
  let inFlight: Promise<Fees> | undefined;
  return {
    async current() {
      const age = cached ? Date.now() - cached.at : Infinity;
      if (cached && age < maxAgeMs) return cached.fees;
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
      if (cached && age < staleMs) {
        inFlight.catch(() => undefined);
        return cached.fees;
      }
      return inFlight;
    },
  };
}
