// Readiness: the RPC answers and the gas wallet holds at least the low-water mark. /settle
// consults a cached result (it must not add an RPC round trip per settle); a cached "not
// ready" is re-checked at once, so recovery is seen on the next call.
import type { JsonRpcProvider } from 'ethers';

export type ReadinessReport = { ready: boolean; checks: { rpc: boolean; gas_balance: boolean } };

export type Readiness = {
  /** A fresh check (GET /healthz?ready=1). */
  check(): Promise<ReadinessReport>;
  /**
   * For POST /settle: a "ready" younger than `cacheMs` is served as is; an older one is served
   * while a fresh check runs in the background; "not ready" is always re-checked at once.
   */
  current(): Promise<ReadinessReport>;
};

const RPC_TIMEOUT_MS = 2_000;

export function createReadiness(opts: { provider: JsonRpcProvider; gasWallet: string; lowWaterWei: bigint; cacheMs: number }): Readiness {
  let last: { report: ReadinessReport; at: number } | undefined;
  let refreshing: Promise<ReadinessReport> | undefined;

  async function check(): Promise<ReadinessReport> {
    let timer: NodeJS.Timeout | undefined;
    const balance = await Promise.race([
      opts.provider.getBalance(opts.gasWallet),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error('rpc timeout')), RPC_TIMEOUT_MS);
      }),
    ]).then(
      (wei) => wei,
      () => null,
    );
    clearTimeout(timer);
    const report = balance === null
      ? { ready: false, checks: { rpc: false, gas_balance: false } }
      : { ready: balance >= opts.lowWaterWei, checks: { rpc: true, gas_balance: balance >= opts.lowWaterWei } };
    last = { report, at: Date.now() };
    return report;
  }

  return {
    check,
    async current() {
      if (last?.report.ready && opts.cacheMs > 0) {
        if (Date.now() - last.at >= opts.cacheMs) refreshing ??= check().finally(() => (refreshing = undefined));
        return last.report;
      }
      return check();
    },
  };
}
