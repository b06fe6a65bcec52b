import { Migration20261122000000_init } from './Migration20261122000000_init.ts';
import { Migration20261122100000_policy } from './Migration20261122100000_policy.ts';
import { Migration20261122100100_analytics } from './Migration20261122100100_analytics.ts';
import { Migration20261122100200_receipts } from './Migration20261122100200_receipts.ts';
import { Migration20261122110000_settlement_config } from './Migration20261122110000_settlement_config.ts';
import { Migration20261122120000_payment_claims } from './Migration20261122120000_payment_claims.ts';
import { Migration20261122123000_analytics_summaries } from './Migration20261122123000_analytics_summaries.ts';
import { Migration20261122140000_cache_invalidation } from './Migration20261122140000_cache_invalidation.ts';
import { Migration20261122150000_policy_decision_retention } from './Migration20261122150000_policy_decision_retention.ts';
import { Migration20261122160000_stream_row_owner } from './Migration20261122160000_stream_row_owner.ts';
import { Migration20261122170000_analytics_gateway_lost } from './Migration20261122170000_analytics_gateway_lost.ts';
import { Migration20261124100000_sketch_index_inline } from './Migration20261124100000_sketch_index_inline.ts';
import { Migration20261124110000_cache_replicas } from './Migration20261124110000_cache_replicas.ts';
import { Migration20261125100000_policy_removal_decision_invocation } from './Migration20261125100000_policy_removal_decision_invocation.ts';
import { Migration20261125100000_start_intents } from './Migration20261125100000_start_intents.ts';
import { Migration20261127100000_unfinished_calls } from './Migration20261127100000_unfinished_calls.ts';
import { Migration20261127105000_open_circuits } from './Migration20261127105000_open_circuits.ts';
import { Migration20261127110000_public_agents } from './Migration20261127110000_public_agents.ts';
import { Migration20261127110100_invocation_caller_kind } from './Migration20261127110100_invocation_caller_kind.ts';
import { Migration20261127120000_payment_identifiers } from './Migration20261127120000_payment_identifiers.ts';
import { Migration20261128040000_analytics_rebuild_summaries } from './Migration20261128040000_analytics_rebuild_summaries.ts';
import { Migration20261128041500_public_interface } from './Migration20261128041500_public_interface.ts';
import { Migration20261128050000_a2a_agents } from './Migration20261128050000_a2a_agents.ts';
import { Migration20261128060000_a2a_task_callers } from './Migration20261128060000_a2a_task_callers.ts';
import { Migration20261128070000_a2a_payment_tasks } from './Migration20261128070000_a2a_payment_tasks.ts';
import { Migration20261206110000_metered_calls } from './Migration20261206110000_metered_calls.ts';
import { Migration20261206120000_mcp_servers } from './Migration20261206120000_mcp_servers.ts';
import { Migration20261206130000_metered_settlement } from './Migration20261206130000_metered_settlement.ts';
import { Migration20261206130000_settlement_cache_notify } from './Migration20261206130000_settlement_cache_notify.ts';
import { Migration20261206140000_mcp_server_session_retention } from './Migration20261206140000_mcp_server_session_retention.ts';
import { Migration20261206150000_mcp_server_cache } from './Migration20261206150000_mcp_server_cache.ts';
import { Migration20261206160000_analytics_fold } from './Migration20261206160000_analytics_fold.ts';
import { Migration20261206160000_budgets } from './Migration20261206160000_budgets.ts';
import { Migration20261206160000_payment_channels } from './Migration20261206160000_payment_channels.ts';
import { Migration20261206170000_channel_claim_rounds } from './Migration20261206170000_channel_claim_rounds.ts';
import { Migration20261206180000_concurrent_indexes } from './Migration20261206180000_concurrent_indexes.ts';
import { Migration20261206183000_channel_claim_quarantine } from './Migration20261206183000_channel_claim_quarantine.ts';
import { Migration20261206190000_stream_ends_by } from './Migration20261206190000_stream_ends_by.ts';
import { Migration20261207090000_channel_refund_in_doubt } from './Migration20261207090000_channel_refund_in_doubt.ts';

// Order matters: this list is the migration history.
export const gatewayMigrations = [
  { name: 'Migration20261122000000_init', class: Migration20261122000000_init },
  { name: 'Migration20261122100000_policy', class: Migration20261122100000_policy },
  { name: 'Migration20261122100100_analytics', class: Migration20261122100100_analytics },
  { name: 'Migration20261122100200_receipts', class: Migration20261122100200_receipts },
  { name: 'Migration20261122110000_settlement_config', class: Migration20261122110000_settlement_config },
  { name: 'Migration20261122120000_payment_claims', class: Migration20261122120000_payment_claims },
  { name: 'Migration20261122123000_analytics_summaries', class: Migration20261122123000_analytics_summaries },
  { name: 'Migration20261122140000_cache_invalidation', class: Migration20261122140000_cache_invalidation },
  {
    name: 'Migration20261122150000_policy_decision_retention',
    class: Migration20261122150000_policy_decision_retention,
  },
  { name: 'Migration20261122160000_stream_row_owner', class: Migration20261122160000_stream_row_owner },
  { name: 'Migration20261122170000_analytics_gateway_lost', class: Migration20261122170000_analytics_gateway_lost },
  { name: 'Migration20261124100000_sketch_index_inline', class: Migration20261124100000_sketch_index_inline },
  { name: 'Migration20261124110000_cache_replicas', class: Migration20261124110000_cache_replicas },
  {
    name: 'Migration20261125100000_policy_removal_decision_invocation',
    class: Migration20261125100000_policy_removal_decision_invocation,
  },
  { name: 'Migration20261125100000_start_intents', class: Migration20261125100000_start_intents },
  { name: 'Migration20261127100000_unfinished_calls', class: Migration20261127100000_unfinished_calls },
  { name: 'Migration20261127105000_open_circuits', class: Migration20261127105000_open_circuits },
  { name: 'Migration20261127110000_public_agents', class: Migration20261127110000_public_agents },
  { name: 'Migration20261127110100_invocation_caller_kind', class: Migration20261127110100_invocation_caller_kind },
  { name: 'Migration20261127120000_payment_identifiers', class: Migration20261127120000_payment_identifiers },
  {
    name: 'Migration20261128040000_analytics_rebuild_summaries',
    class: Migration20261128040000_analytics_rebuild_summaries,
  },
  { name: 'Migration20261128041500_public_interface', class: Migration20261128041500_public_interface },
  { name: 'Migration20261128050000_a2a_agents', class: Migration20261128050000_a2a_agents },
  { name: 'Migration20261128060000_a2a_task_callers', class: Migration20261128060000_a2a_task_callers },
  { name: 'Migration20261128070000_a2a_payment_tasks', class: Migration20261128070000_a2a_payment_tasks },
  { name: 'Migration20261206110000_metered_calls', class: Migration20261206110000_metered_calls },
  { name: 'Migration20261206120000_mcp_servers', class: Migration20261206120000_mcp_servers },
  { name: 'Migration20261206130000_metered_settlement', class: Migration20261206130000_metered_settlement },
  { name: 'Migration20261206130000_settlement_cache_notify', class: Migration20261206130000_settlement_cache_notify },
  {
    name: 'Migration20261206140000_mcp_server_session_retention',
    class: Migration20261206140000_mcp_server_session_retention,
  },
  { name: 'Migration20261206150000_mcp_server_cache', class: Migration20261206150000_mcp_server_cache },
  { name: 'Migration20261206160000_analytics_fold', class: Migration20261206160000_analytics_fold },
  { name: 'Migration20261206160000_budgets', class: Migration20261206160000_budgets },
  { name: 'Migration20261206160000_payment_channels', class: Migration20261206160000_payment_channels },
  { name: 'Migration20261206170000_channel_claim_rounds', class: Migration20261206170000_channel_claim_rounds },
  { name: 'Migration20261206180000_concurrent_indexes', class: Migration20261206180000_concurrent_indexes },
  {
    name: 'Migration20261206183000_channel_claim_quarantine',
    class: Migration20261206183000_channel_claim_quarantine,
  },
  { name: 'Migration20261206190000_stream_ends_by', class: Migration20261206190000_stream_ends_by },
  {
    name: 'Migration20261207090000_channel_refund_in_doubt',
    class: Migration20261207090000_channel_refund_in_doubt,
  },
];
