// The x402 `bazaar` extension of a public agent (x402 specs/extensions/bazaar.md): how to call
// it, from its tenant's `public_interface`, built with @x402/extensions' own declaration
// helpers. The same object is declared in the agent's v2 challenges and listed by the
// discovery endpoints (api/routes/discovery.ts), so a client finds what it will be asked.
// An http agent is a JSON POST (its input example and schema); an MCP agent is one declaration
// per tool (the tool's argument schema and example, over streamable HTTP).
import { bazaarResourceServerExtension, declareDiscoveryExtension } from '@x402/extensions/bazaar';
import type { Agent } from '../../gateway/db/entities.ts';
import { keptTools, type ReadTools } from './tool-schemas.ts';

export type PublicInterface = NonNullable<Agent['publicInterface']>;

/**
 * The agent's public interface with the tools its upstream listed (tool-schemas.ts) filled in:
 * for each tool, what the tenant described wins, field by field.
 */
export function describedInterface(
  agent: Pick<Agent, 'publicInterface'>,
  read: ReadTools | undefined,
): PublicInterface {
  const own = agent.publicInterface ?? {};
  if (!read || Object.keys(read).length === 0) return own;
  const tools: NonNullable<PublicInterface['tools']> = { ...read };
  for (const [name, described] of Object.entries(own.tools ?? {})) tools[name] = { ...read[name], ...described };
  return { ...own, tools };
}

/** An MCP tool whose schema the tenant has not described takes any object. */
const ANY_OBJECT = { type: 'object' };

/** The `extensions` entry (`{ bazaar: … }`) describing a call of this agent, or of this tool of an MCP agent. */
export function bazaarExtensionOf(
  agent: Pick<Agent, 'protocol' | 'publicDescription' | 'publicInterface'>,
  tool: string | null,
): Record<string, unknown> {
  const described = agent.publicInterface ?? {};
  const output = described.output_example === undefined ? undefined : { example: described.output_example };
  if (agent.protocol === 'mcp') {
    if (tool === null) return {};
    const toolDescribed = described.tools && Object.hasOwn(described.tools, tool) ? described.tools[tool] : undefined;
    return declareDiscoveryExtension({
      toolName: tool,
      description: toolDescribed?.description ?? agent.publicDescription ?? undefined,
      transport: 'streamable-http',
      inputSchema: toolDescribed?.input_schema ?? ANY_OBJECT,
      ...(toolDescribed?.example === undefined ? {} : { example: toolDescribed.example }),
      ...(output ? { output } : {}),
    });
  }
  const declared = declareDiscoveryExtension({
    bodyType: 'json',
    input: (described.input_example as Record<string, unknown> | undefined) ?? {},
    ...(described.input_schema ? { inputSchema: described.input_schema } : {}),
    ...(output ? { output } : {}),
  });
  // The method is the request's at declaration time in the library; a public agent's is POST.
  return { bazaar: bazaarResourceServerExtension.enrichDeclaration!(declared.bazaar, postContext) };
}

/** What enrichDeclaration reads of an HTTP request: its method (no route pattern: the URL is static). */
const postContext = { method: 'POST', adapter: { getPath: () => '/' } };

/**
 * The extensions a v2 challenge of this call declares beside payment-identifier: a public
 * agent's `bazaar` (the call's tool for an MCP `tools/call`), so a client that pays it can
 * catalog it; nothing for an agent that is not public.
 */
export function discoveryExtensionsOf(call: {
  agent: Pick<Agent, 'public' | 'protocol' | 'publicDescription' | 'publicInterface'> &
    Partial<Pick<Agent, 'id' | 'upstreamUrl' | 'credentialRef' | 'updatedAt'>>;
  mcp: { method: string; tool: string | null } | null;
}): Record<string, unknown> {
  const { agent } = call;
  if (!agent.public) return {};
  // An MCP tool as the catalog showed it: with what the upstream's tools/list said, once read.
  const { id, upstreamUrl = null, credentialRef = null, updatedAt } = agent;
  const read = id && updatedAt ? keptTools({ id, upstreamUrl, credentialRef, updatedAt }) : undefined;
  const described = agent.protocol === 'mcp' ? describedInterface(agent, read) : agent.publicInterface;
  return bazaarExtensionOf(
    { protocol: agent.protocol, publicDescription: agent.publicDescription, publicInterface: described },
    call.mcp?.method === 'tools/call' ? call.mcp.tool : null,
  );
}
