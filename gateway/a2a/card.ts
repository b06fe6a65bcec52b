// The upstream's Agent Card (A2A: `/.well-known/agent-card.json` on the agent's origin), read
// when an a2a agent is created or its upstream_url changes, through the same SSRF-guarded
// dispatcher as every upstream call (no redirects followed), within a size and a time bound,
// and kept on the agent. The gateway shows its skills and serves a card of its own built from
// it (servedCard): the gateway's address, the gateway's security scheme, nothing of the
// upstream's address or credentials.
import { request, type Dispatcher } from 'undici';
import { holdsUnstorableText } from '../../lib/storable-text.ts';
import { A2A_X402_DESCRIPTION, A2A_X402_EXTENSION } from './x402.ts';

const CARD_PATH = '/.well-known/agent-card.json';
/** The largest card read (a card is a few KiB; a larger answer is refused, not truncated). */
const MAX_CARD_BYTES = 256 * 1024;
/** Connect, answer and body together. */
const CARD_TIMEOUT_MS = 5_000;

export class AgentCardError extends Error {}

export type StoredCard = Record<string, unknown>;

/** Reads the card of the agent at `upstreamUrl` (its origin's well-known path). */
export async function fetchAgentCard(dispatcher: Dispatcher, upstreamUrl: string): Promise<StoredCard> {
  const url = new URL(CARD_PATH, upstreamUrl);
  const signal = AbortSignal.timeout(CARD_TIMEOUT_MS);
  let text: string;
  try {
    const reply = await request(url, {
      method: 'GET',
      dispatcher,
      signal,
      headers: { accept: 'application/json' },
    });
    if (reply.statusCode !== 200) {
      await reply.body.dump();
      throw new AgentCardError(`the upstream answered ${reply.statusCode} for its agent card`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of reply.body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > MAX_CARD_BYTES) {
        reply.body.destroy();
        throw new AgentCardError(`the upstream's agent card is larger than ${MAX_CARD_BYTES / 1024} KiB`);
      }
      chunks.push(chunk);
    }
    text = Buffer.concat(chunks).toString('utf8');
  } catch (err) {
    if (err instanceof AgentCardError) throw err;
    throw new AgentCardError(
      signal.aborted
        ? 'the upstream did not answer its agent card in time'
        : 'the upstream agent card could not be read',
    );
  }
  let card: unknown;
  try {
    card = JSON.parse(text);
  } catch {
    throw new AgentCardError("the upstream's agent card is not JSON");
  }
  if (card === null || typeof card !== 'object' || Array.isArray(card) || typeof (card as StoredCard).name !== 'string')
    throw new AgentCardError("the upstream's agent card is not an Agent Card (no name)");
  // Stored in jsonb, which cannot hold U+0000 nor a lone surrogate.
  if (holdsUnstorableText(card))
    throw new AgentCardError("the upstream's agent card holds NUL characters or lone surrogates");
  return card as StoredCard;
}

export type CardSkill = { id: string; name: string; description: string; tags: string[] };

const str = (value: unknown, max: number): string => (typeof value === 'string' ? value.slice(0, max) : '');

/** The card's skills as the agent's representation shows them (bounded, strings only). */
export function skillsOf(card: StoredCard | null): CardSkill[] {
  const skills = card?.skills;
  if (!Array.isArray(skills)) return [];
  return skills.slice(0, 200).flatMap((s: unknown) => {
    const skill = s as Record<string, unknown> | null;
    if (!skill || typeof skill.id !== 'string') return [];
    return [
      {
        id: str(skill.id, 256),
        name: str(skill.name, 256),
        description: str(skill.description, 2000),
        tags: Array.isArray(skill.tags) ? skill.tags.slice(0, 50).map((t) => str(t, 100)) : [],
      },
    ];
  });
}

/** The A2A protocol versions the upstream declares for JSON-RPC (1.0 when it says nothing usable). */
function jsonRpcVersions(card: StoredCard): string[] {
  const versions = new Set<string>();
  const interfaces = Array.isArray(card.supportedInterfaces) ? card.supportedInterfaces : [];
  for (const i of interfaces as Array<Record<string, unknown>>) {
    if (i?.protocolBinding === 'JSONRPC' && typeof i.protocolVersion === 'string') versions.add(i.protocolVersion);
  }
  // A 0.3 card names its version and its preferred transport at the top.
  if (typeof card.protocolVersion === 'string' && typeof card.url === 'string') versions.add('0.3');
  return versions.size ? [...versions].sort().reverse() : ['1.0'];
}

/** How the gateway's card says callers authenticate: where it is served, and with what. */
export type ServedSecurity =
  | { kind: 'bearer' }
  /**
   * A public agent: no token (no security scheme at all), paid per call with x402, which the
   * x402 A2A extension declares (not required: HTTP 402 stays accepted).
   */
  | { kind: 'x402' };

/**
 * The card callers get from the gateway: the upstream's, with every interface at `url` (the
 * gateway's JSON-RPC endpoint for the agent), the gateway's security scheme in place of the
 * upstream's, and nothing that would show the upstream: its signatures (they sign the
 * upstream's card, not this one), links on the upstream's origin, per-skill security
 * requirements, and the extended card (its method is not passed).
 */
export function servedCard(card: StoredCard, upstreamUrl: string, url: string, security: ServedSecurity): StoredCard {
  // The upstream's host under any scheme or port (its card may name its docs on another port).
  const upstreamHost = new URL(upstreamUrl).hostname;
  const onUpstream = (value: unknown) => {
    try {
      return typeof value === 'string' && new URL(value).hostname === upstreamHost;
    } catch {
      return false;
    }
  };
  const legacy = typeof card.url === 'string';
  const {
    signatures: _signatures,
    securitySchemes: _schemes,
    securityRequirements: _requirements,
    security: _security,
    additionalInterfaces: _additional,
    supportsAuthenticatedExtendedCard: _extended,
    ...rest
  } = card;
  const out: StoredCard = { ...rest };
  for (const field of ['documentationUrl', 'iconUrl']) if (onUpstream(out[field])) delete out[field];
  const provider = out.provider as Record<string, unknown> | undefined;
  if (provider && onUpstream(provider.url)) out.provider = { ...provider, url: '' };
  const capabilities = { ...((out.capabilities as Record<string, unknown> | undefined) ?? {}) };
  capabilities.extendedAgentCard = false;
  if (security.kind === 'x402') {
    const extensions = Array.isArray(capabilities.extensions) ? capabilities.extensions : [];
    capabilities.extensions = [
      ...extensions,
      { uri: A2A_X402_EXTENSION, description: A2A_X402_DESCRIPTION, required: false },
    ];
  }
  out.capabilities = capabilities;
  out.supportedInterfaces = jsonRpcVersions(card).map((protocolVersion) => ({
    url,
    protocolBinding: 'JSONRPC',
    protocolVersion,
  }));
  if (Array.isArray(out.skills))
    out.skills = (out.skills as Array<Record<string, unknown>>).map((skill) => {
      const { securityRequirements: _r, security: _s, ...kept } = skill ?? {};
      return kept;
    });
  if (security.kind === 'bearer') {
    const description = "The gateway's bearer token (JWT); the agent's own credential is the gateway's to send.";
    out.securitySchemes = {
      gateway_bearer: legacy
        ? { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description }
        : { httpAuthSecurityScheme: { scheme: 'Bearer', bearerFormat: 'JWT', description } },
    };
    if (legacy) out.security = [{ gateway_bearer: [] }];
    else out.securityRequirements = [{ schemes: { gateway_bearer: { list: [] } } }];
  }
  if (legacy) {
    out.url = url;
    out.preferredTransport = 'JSONRPC';
  }
  return out;
}
