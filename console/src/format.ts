// How figures read: USDC amounts (the one asset agents are priced in, 6 decimals), durations,
// instants in the browser's zone.
const USDC_DECIMALS = 6;

/** An amount in the asset's smallest unit as a decimal USDC figure, exactly (no float rounding). */
export function usdc(units: string | number | bigint | null | undefined): string {
  if (units === null || units === undefined || units === '') return '—';
  let n: bigint;
  try {
    n = BigInt(typeof units === 'number' ? Math.round(units) : units);
  } catch {
    return String(units);
  }
  const negative = n < 0n;
  const abs = negative ? -n : n;
  const scale = 10n ** BigInt(USDC_DECIMALS);
  const fraction = (abs % scale).toString().padStart(USDC_DECIMALS, '0').replace(/0+$/, '');
  return `${negative ? '-' : ''}${abs / scale}${fraction ? `.${fraction}` : ''} USDC`;
}

export const ms = (value: number | null | undefined): string =>
  value === null || value === undefined
    ? '—'
    : value >= 10_000
      ? `${(value / 1000).toFixed(1)} s`
      : `${Math.round(value)} ms`;

export const percent = (rate: number): string => `${(rate * 100).toFixed(rate > 0 && rate < 0.01 ? 2 : 1)} %`;

export const count = (n: number): string => n.toLocaleString('en');

export function when(iso: string | null | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  return d.toLocaleString(undefined, { dateStyle: 'short', timeStyle: 'medium' });
}

/** A long id or hash shortened for a table cell; the full value stays in its title. */
export const short = (value: string, keep = 10): string =>
  value.length > keep * 2 + 1 ? `${value.slice(0, keep)}…${value.slice(-6)}` : value;
