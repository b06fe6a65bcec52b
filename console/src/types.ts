// The /v1 answers the console reads, as far as it reads them (api/ holds their full schemas).
type Pricing = { amount: string; asset: string; network: string; pay_to: string; scheme?: string };

export type Agent = {
  id: string;
  name: string;
  status: string;
  protocol: string;
  pricing: Pricing | null;
  public: boolean;
  public_url?: string | null;
  created_at: string;
};

export type Invocation = {
  invocation_id: string;
  agent_id: string;
  status: 'pending' | 'running' | 'succeeded' | 'failed';
  created_at: string;
  completed_at: string | null;
  upstream_status: number | null;
  latency_ms: number | null;
  error_class: string | null;
  mode: 'transactional' | 'streaming';
  caller_kind: 'token' | 'x402';
  payment_network: string | null;
  payment_asset: string | null;
  payment_amount: string | null;
  payment_payer: string | null;
  payment_transaction: string | null;
  payment_scheme?: string | null;
  payment_max_amount?: string | null;
  payment_charge?: string | null;
  payment_settlement?: string | null;
  payment_settle_error?: string | null;
  /** A batch-settlement call's payment channel. */
  payment_channel?: string | null;
};

type Percentiles = { p50: number | null; p95: number | null; p99: number | null };

export type AnalyticsGroup = {
  agent_id: string;
  bucket_start: string;
  count: number;
  error_rate: number;
  by_error_class: Record<string, number>;
  latency_ms: Percentiles;
  ttft_ms: Percentiles;
  /** What the group's paid calls brought (additive: absent from an API that predates it). */
  revenue?: { count: number; amount: string; uncollected?: { count: number; amount: string } };
};

export type AnalyticsResult = {
  range: { since: string; until: string };
  bucket: 'hour' | 'day';
  groups: AnalyticsGroup[];
};

type CallerGroup = {
  user_id: string;
  caller_kind: 'token' | 'x402';
  agent_id: string;
  bucket_start: string;
  count: number;
  error_rate: number;
};

export type CallerResult = { groups: CallerGroup[]; truncated: boolean };

export type Decision = {
  id: string;
  agent_id: string;
  protocol: string;
  mcp_tool: string | null;
  action: string;
  matched_rule: string;
  reason: string;
  invocation_id: string | null;
  created_at: string;
};

export type Receipt = {
  invocation_id: string;
  kid: string;
  alg: string;
  format: string;
  receipt: string;
  created_at: string;
};
