// Readiness: the RPC answers and the gas wallet holds at least the low-water mark. /settle
// consults a cached result (it must not add an RPC round trip per settle); a cached "not
// ready" is re-checked at once, so recovery is seen on the next call.
import type { JsonRpcProvider } from 'ethers';
import { cachedProbe } from '../lib/cached-probe.ts';

type ReadinessReport = { ready: boolean; checks: { rpc: boolean; gas_balance: boolean } };

export type Readiness = {
  /**
   * For the open GET /healthz?ready=1: at most one RPC check per PUBLIC_PROBE_INTERVAL_MS
   * whatever the request rate, kept apart from the state /settle reads (a public probe never
   * overwrites it).
   */
  probe(): Promise<ReadinessReport>;
  /**
   * For POST /settle: a "ready" younger than `cacheMs` is served as is; an older one is served
   * while a fresh check runs in the background; "not ready" is always re-checked at once.
   */
  current(): Promise<ReadinessReport>;
};

const RPC_TIMEOUT_MS = 2_000;
const PUBLIC_PROBE_INTERVAL_MS = 1_000;

export function createReadiness(opts: {
  provider: JsonRpcProvider;
  gasWallet: string;
  lowWaterWei: bigint;
  cacheMs: number;
}): Readiness {
  let last: { report: ReadinessReport; at: number } | undefined;
  let refreshing: Promise<ReadinessReport> | undefined;

  async function measure(): Promise<ReadinessReport> {
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
    return balance === null
      ? { ready: false, checks: { rpc: false, gas_balance: false } }
      : { ready: balance >= opts.lowWaterWei, checks: { rpc: true, gas_balance: balance >= opts.lowWaterWei } };
  }

  async function check(): Promise<ReadinessReport> {
    const report = await measure();
    last = { report, at: Date.now() };
    return report;
  }

  return {
    probe: cachedProbe(measure, PUBLIC_PROBE_INTERVAL_MS),
    async current() {
      if (last?.report.ready && opts.cacheMs > 0) {
        if (Date.now() - last.at >= opts.cacheMs) refreshing ??= check().finally(() => (refreshing = undefined));
        return last.report;
      }
      return check();
    },
  };
}
