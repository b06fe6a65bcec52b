import { Migration } from '@mikro-orm/migrations';

// The gateway's first schema: the catalog (agents, credentials), invocations and their
// claim-checked bodies. Written as SQL on purpose: the partial unique index and the
// CHECK constraints are the real guarantees and must read exactly as they run.
export class Migration20261122000000_init extends Migration {
  override up(): void {
    this.addSql(`
      create table credentials (
        id text primary key,
        tenant_id text not null,
        name text not null,
        auth_type text not null check (auth_type in ('bearer', 'api_key', 'none')),
        source text not null check (source in ('managed', 'vault')),
        header_name text,
        masked_hint text,
        vault_ref text,
        version integer not null default 1,
        kek_id text,
        wrapped_key bytea,
        secret_ciphertext bytea,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now(),
        unique (tenant_id, name)
      )`);
    this.addSql(`
      create table agents (
        id text primary key,
        tenant_id text not null,
        name text not null,
        description text,
        tags jsonb not null default '[]',
        metadata jsonb not null default '{}',
        upstream_url text,
        credential_ref text,
        emit_receipts boolean not null default false,
        capture_body boolean not null default false,
        protocol text not null default 'http' check (protocol in ('http', 'mcp')),
        mcp_transport text,
        mcp_protocol_version text,
        pricing jsonb,
        rate_limit_rps double precision,
        rate_limit_burst integer,
        retry_non_idempotent boolean not null default false,
        suspended boolean not null default false,
        suspended_reason text,
        deleted_at timestamptz,
        created_by text not null,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now()
      )`);
    // Names are unique among the tenant's live (active or pending) agents only; the index
    // makes concurrent creates race safely, one wins and the other gets 409.
    this.addSql(`create unique index agents_live_name on agents (tenant_id, name) where deleted_at is null`);
    this.addSql(`create index agents_tenant_created on agents (tenant_id, id)`);
    this.addSql(`create index agents_credential_ref on agents (tenant_id, credential_ref) where deleted_at is null`);

    // Claim check: request and response bodies live here and travel through Temporal by id.
    // No foreign keys to it: the body store sits behind an interface an object store could fill.
    this.addSql(`
      create table bodies (
        id text primary key,
        tenant_id text not null,
        content_type text,
        content bytea not null,
        size_bytes bigint not null,
        sha256 text not null,
        created_at timestamptz not null default now()
      )`);

    this.addSql(`
      create table invocations (
        id text primary key,
        tenant_id text not null,
        agent_id text not null,
        mode text not null check (mode in ('transactional', 'streaming')),
        status text not null check (status in ('pending', 'running', 'succeeded', 'failed')),
        request_id text not null,
        caller text not null,
        model text,
        content_type text,
        request_headers jsonb not null default '{}',
        request_body_id text,
        request_bytes bigint,
        response_body_id text,
        response_content_type text,
        upstream_status integer,
        latency_ms bigint,
        ttft_ms bigint,
        error_class text,
        mcp_method text,
        mcp_tool text,
        attempts integer not null default 0,
        payment_network text,
        payment_asset text,
        payment_amount text,
        payment_payer text,
        payment_nonce text,
        payment_transaction text,
        created_at timestamptz not null default now(),
        updated_at timestamptz not null default now(),
        completed_at timestamptz
      )`);
    this.addSql(`create index invocations_tenant_created on invocations (tenant_id, created_at desc, id desc)`);
    this.addSql(`create index invocations_agent_created on invocations (tenant_id, agent_id, created_at desc)`);
  }

  override down(): void {
    this.addSql('drop table if exists invocations');
    this.addSql('drop table if exists bodies');
    this.addSql('drop table if exists agents');
    this.addSql('drop table if exists credentials');
  }
}
