// The registry of the payment schemes the facilitator settles: each scheme's folder beside this
// file holds its facilitator part (the kind it settles, its /settle handling) over its protocol
// part (x402/schemes/<name>/). /supported lists their kinds; /settle is dispatched by the
// requirements' (scheme, network).
import type { FacilitatorConfig } from '../config.ts';
import type { FacilitatorScheme, SchemeDeps, Settler, SupportedKind, Verifier } from './scheme.ts';
import { exactFacilitatorScheme } from './exact/index.ts';
import { uptoFacilitatorScheme } from './upto/index.ts';
import { batchSettlementFacilitatorScheme } from './batch-settlement/index.ts';
import { SCHEME_UPTO } from '../../x402/schemes/upto/schemas.ts';
import { SCHEME_BATCH_SETTLEMENT } from '../../x402/schemes/batch-settlement/schemas.ts';

/** The spec's one kind, always settled. */
const BASE_SCHEME = exactFacilitatorScheme;
/** Settled only where the deployment opts in (FACILITATOR_EXTRA_SCHEMES), by name. */
const EXTRA_SCHEMES: ReadonlyMap<string, FacilitatorScheme> = new Map([
  [SCHEME_UPTO, uptoFacilitatorScheme],
  [SCHEME_BATCH_SETTLEMENT, batchSettlementFacilitatorScheme],
]);

/** The schemes this deployment settles: exact, then each extra one its configuration names. */
function schemesOf(config: FacilitatorConfig): FacilitatorScheme[] {
  const extra = [...EXTRA_SCHEMES].filter(([name]) => config.extraSchemes?.includes(name)).map(([, scheme]) => scheme);
  return [BASE_SCHEME, ...extra];
}

/** The kinds this deployment settles, as /supported lists them. */
export function supportedKinds(config: FacilitatorConfig): SupportedKind[] {
  return schemesOf(config).map((scheme) => scheme.kind(config));
}

/**
 * The addresses that send the settled schemes' transactions, by CAIP-2 family, as /supported's
 * `signers` names them (x402 v2); null when no scheme names any (exact and upto alone).
 */
export function supportedSigners(config: FacilitatorConfig): Record<string, string[]> | null {
  const signers = [...new Set(schemesOf(config).flatMap((scheme) => scheme.signers?.(config) ?? []))];
  return signers.length ? { 'eip155:*': signers } : null;
}

/** A handler per kind, built once: finds the one of a (scheme, network), or null when none handles it. */
function byKind<T>(
  deps: SchemeDeps,
  build: (scheme: FacilitatorScheme) => T | undefined,
): (scheme: string, network: string) => T | null {
  const handlers = schemesOf(deps.config).flatMap((scheme) => {
    const handler = build(scheme);
    if (handler === undefined) return [];
    const kind = scheme.kind(deps.config);
    return [{ kind, networks: scheme.networks?.(deps.config) ?? [kind.network], handler }];
  });
  return (scheme, network) =>
    handlers.find(({ kind, networks }) => kind.scheme === scheme && networks.includes(network))?.handler ?? null;
}

/** The /settle handler of each kind. */
export function settlersFor(deps: SchemeDeps): (scheme: string, network: string) => Settler | null {
  return byKind(deps, (scheme) => scheme.settler(deps));
}

/** The /verify of each kind that offers one. */
export function verifiersFor(deps: SchemeDeps): (scheme: string, network: string) => Verifier | null {
  return byKind(deps, (scheme) => scheme.verifier?.(deps));
}
