// Policy evaluation: a pure function of the document and the facts of one call. Rules are
// tried in order and the first whose every populated field matches decides; no match gives
// `default`; any failure while evaluating (the rate window unreachable, a stored document
// that no longer parses) gives `on_error`.
import { PolicyDocument, type PolicyAction, type PolicyMatch } from './schema.ts';
import { canonicalA2aMethod } from '../a2a/methods.ts';

export type CallFacts = {
  agentId: string;
  /** The parsed MCP tool; null for http agents and for MCP methods other than tools/call. */
  tool: string | null;
  /** Request body size; null when unknown (streaming without Content-Length): treated as unbounded. */
  bodyBytes: number | null;
  /** How the caller came in: a /v1 token, or a public agent's payer (x402). */
  callerKind: 'token' | 'x402';
  /** The JSON-RPC method: an A2A call's (its 1.0 name), an MCP call's; null for http agents. */
  method?: string | null;
  /** The skill an A2A call's message names in its metadata; null otherwise. */
  skill?: string | null;
};

/** The caller's requests over the last minute, this one included. Asked at most once, and only when a rule needs it. */
export type RateProbe = () => Promise<number>;

export type Verdict = {
  action: PolicyAction;
  /** 1-based position of the deciding rule; null when default or on_error decided. */
  matchedRule: number | null;
  /** What decided: a rule, the policy's default, or its on_error. */
  source: 'rule' | 'default' | 'on_error';
  /** Coarse, caller-safe; never call content. */
  reason: string;
};

function toolMatches(pattern: string, tool: string): boolean {
  return pattern.endsWith('*') ? tool.startsWith(pattern.slice(0, -1)) : tool === pattern;
}

/** A name pattern against a value, never matching a call without one. */
function anyMatches(patterns: string[], value: string | null | undefined): boolean {
  return value !== null && value !== undefined && patterns.some((pattern) => toolMatches(pattern, value));
}

/** An A2A method named in either spelling means its 1.0 name, the one calls carry. */
const methodPattern = (pattern: string) => canonicalA2aMethod(pattern) ?? pattern;

async function matches(match: PolicyMatch | undefined, facts: CallFacts, rate: RateProbe): Promise<boolean> {
  if (!match) return true;
  if (match.agents?.length && !match.agents.includes(facts.agentId)) return false;
  if (match.callers?.length && !match.callers.includes(facts.callerKind)) return false;
  if (match.tools?.length) {
    // A tool condition never matches a call without a tool (every protocol=http call).
    const tool = facts.tool;
    if (tool === null || !match.tools.some((pattern) => toolMatches(pattern, tool))) return false;
  }
  if (match.methods?.length && !anyMatches(match.methods.map(methodPattern), facts.method)) return false;
  if (match.skills?.length && !anyMatches(match.skills, facts.skill)) return false;
  if (match.max_body_bytes !== undefined && facts.bodyBytes !== null && facts.bodyBytes < match.max_body_bytes)
    return false;
  // Last: the only condition that costs a round trip.
  if (match.rate_per_min !== undefined && !((await rate()) > match.rate_per_min)) return false;
  return true;
}

export async function evaluatePolicy(stored: unknown, facts: CallFacts, rate: RateProbe): Promise<Verdict> {
  // The stored document was validated on write; parsing again guards against a row written
  // by an older or newer release, and a failure here is an engine failure, not a crash.
  const parsed = PolicyDocument.safeParse(stored);
  if (!parsed.success) {
    const onError = (stored as { on_error?: unknown } | null)?.on_error;
    const action = onError === 'allow' || onError === 'warn' || onError === 'deny' ? onError : 'deny';
    return { action, matchedRule: null, source: 'on_error', reason: 'policy evaluation failed' };
  }
  const policy = parsed.data;
  try {
    for (const [index, rule] of policy.rules.entries()) {
      if (await matches(rule.match, facts, rate))
        return { action: rule.action, matchedRule: index + 1, source: 'rule', reason: `rule ${index + 1} matched` };
    }
    return { action: policy.default, matchedRule: null, source: 'default', reason: 'no rule matched' };
  } catch {
    return { action: policy.on_error, matchedRule: null, source: 'on_error', reason: 'policy evaluation failed' };
  }
}
