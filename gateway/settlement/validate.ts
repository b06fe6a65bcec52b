// Whether a secret can serve as the facilitator credential: a readable PEM client
// certificate and matching private key (format: pem.ts). Returns a caller-safe reason.
import { bundleProblemMessage, parseClientTlsBundle } from './pem.ts';

export async function facilitatorSecretProblem(read: () => Promise<string | null>): Promise<string | undefined> {
  let secret: string | null;
  try {
    secret = await read();
  } catch {
    return 'the facilitator credential could not be read';
  }
  if (!secret) return bundleProblemMessage('no_certificate');
  const bundle = parseClientTlsBundle(secret);
  return typeof bundle === 'string' ? bundleProblemMessage(bundle) : undefined;
}

/** The facilitator is called over mutual TLS: https only, and not at an internal host unless allow-listed. */
export function facilitatorUrlProblem(raw: string, refusal: (url: string) => string | undefined): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'facilitator_url must be an https URL';
  }
  if (url.protocol !== 'https:' || !url.hostname) return 'facilitator_url must be an https URL';
  if (url.search || url.hash) return 'facilitator_url must not carry a query or fragment';
  return refusal(raw);
}
