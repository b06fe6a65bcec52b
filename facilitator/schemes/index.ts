// The registry of the payment schemes the facilitator settles: each scheme's folder beside this
// file holds its facilitator part (the kind it settles, its /settle handling) over its protocol
// part (x402/schemes/<name>/). /supported lists their kinds; /settle is dispatched by the
// requirements' (scheme, network).
import type { FacilitatorConfig } from '../config.ts';
import type { FacilitatorScheme, SchemeDeps, Settler, SupportedKind } from './scheme.ts';
import { exactFacilitatorScheme } from './exact/index.ts';
import { uptoFacilitatorScheme } from './upto/index.ts';

const SCHEMES: readonly FacilitatorScheme[] = [exactFacilitatorScheme, uptoFacilitatorScheme];

/** The kinds this deployment settles, as /supported lists them. */
export function supportedKinds(config: FacilitatorConfig): SupportedKind[] {
  return SCHEMES.map((scheme) => scheme.kind(config));
}

/** The handler of each kind, built once: finds the one of a (scheme, network), or null when none settles it. */
export function settlersFor(deps: SchemeDeps): (scheme: string, network: string) => Settler | null {
  const settlers = SCHEMES.map((scheme) => {
    const kind = scheme.kind(deps.config);
    return { kind, networks: scheme.networks?.(deps.config) ?? [kind.network], settle: scheme.settler(deps) };
  });
  return (scheme, network) =>
    settlers.find(({ kind, networks }) => kind.scheme === scheme && networks.includes(network))?.settle ?? null;
}
