import { Migration } from '@mikro-orm/migrations';

// A2A agents (docs/API.md "A2A agents"): protocol `a2a`; the upstream's Agent Card as read when
// the agent was created or its upstream_url changed; whether methods the gateway does not know
// pass. Invocations record the A2A method (1.0 name), the skill the message named, and the task
// and context the call was about, listable by task. `a2a_tasks` binds each task id seen through
// an agent to that agent and its tenant.
export class Migration20261128050000_a2a_agents extends Migration {
  override up(): void {
    this.addSql(`alter table agents drop constraint if exists agents_protocol_check`);
    this.addSql(`alter table agents add constraint agents_protocol_check check (protocol in ('http', 'mcp', 'a2a'))`);
    this.addSql(
      `alter table agents
         add column a2a_card jsonb null,
         add column a2a_card_read_at timestamptz null,
         add column a2a_pass_unknown_methods boolean not null default false`,
    );
    this.addSql(
      `alter table invocations
         add column a2a_method text null,
         add column a2a_skill text null,
         add column a2a_task_id text null,
         add column a2a_context_id text null`,
    );
    this.addSql(
      `create index invocations_a2a_task_idx on invocations (tenant_id, a2a_task_id, created_at desc, id desc)
         where a2a_task_id is not null`,
    );
    this.addSql(
      `create table a2a_tasks (
         agent_id text not null references agents (id),
         task_id text not null,
         tenant_id text not null,
         context_id text null,
         created_at timestamptz not null default now(),
         primary key (agent_id, task_id)
       )`,
    );
  }

  override down(): void {
    this.addSql('drop table if exists a2a_tasks');
    this.addSql('drop index if exists invocations_a2a_task_idx');
    this.addSql(
      `alter table invocations drop column if exists a2a_method, drop column if exists a2a_skill,
         drop column if exists a2a_task_id, drop column if exists a2a_context_id`,
    );
    this.addSql(
      `alter table agents drop column if exists a2a_card, drop column if exists a2a_card_read_at,
         drop column if exists a2a_pass_unknown_methods`,
    );
    this.addSql(`alter table agents drop constraint if exists agents_protocol_check`);
    this.addSql(`alter table agents add constraint agents_protocol_check check (protocol in ('http', 'mcp'))`);
  }
}
