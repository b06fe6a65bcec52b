// The 400 message for a URL the gateway will not call (an agent's upstream_url, the tenant's
// facilitator_url): `invalid <field>: <cause>`, the cause being the scheme, credentials in the
// URL, localhost, or the class of an internal literal address (gateway/upstream/ssrf.ts). With
// UPSTREAM_ALLOW_HINT (set by `npm start`) a local host's refusal also gives the
// UPSTREAM_ALLOW value that would admit it.
import { upstreamRefusal, type UpstreamRefusal } from '../gateway/upstream/ssrf.ts';
import type { GatewayConfig } from '../gateway/config.ts';

function causeOf(refusal: UpstreamRefusal): string {
  switch (refusal.cause) {
    case 'url':
      return 'not an absolute URL';
    case 'scheme':
      return 'the scheme must be http or https';
    case 'host':
      return 'the URL has no host';
    case 'credentials':
      return 'credentials in the URL are not accepted (store them as a credential)';
    case 'localhost':
      return 'localhost is not reachable through the gateway';
    case 'internal':
      return `${refusal.class === 'unspecified' ? 'an' : 'a'} ${refusal.class} address is not reachable through the gateway`;
  }
}

export function upstreamUrlProblem(
  field: string,
  url: string,
  upstream: Pick<GatewayConfig['upstream'], 'allow' | 'allowHint'>,
): string | undefined {
  const refusal = upstreamRefusal(url, upstream.allow);
  if (!refusal) return undefined;
  const message = `invalid ${field}: ${causeOf(refusal)}`;
  if (!upstream.allowHint || (refusal.cause !== 'localhost' && refusal.cause !== 'internal')) return message;
  const allow = [...upstream.allow, refusal.hostPort].join(',');
  return `${message}; to allow it, restart npm start with UPSTREAM_ALLOW=${allow}`;
}
