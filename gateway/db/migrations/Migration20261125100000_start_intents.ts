import { Migration } from '@mikro-orm/migrations';

// A transactional row `pending` is its call's intent to start InvocationWorkflow, committed with
// the row before the 202; the accepting process starts the workflow just after, and the start
// relay (temporal/start-relay.ts) starts any intent older than a few seconds. `workflow_started_at`
// records a start the relay made (so it does not start it again); `start_lease_until` keeps two
// relays from starting the same row at once. The partial index holds only unstarted intents.
export class Migration20261125100000_start_intents extends Migration {
  override up(): void {
    this.addSql(
      'alter table invocations add column workflow_started_at timestamptz, add column start_lease_until timestamptz',
    );
    this.addSql(
      `create index invocations_unstarted on invocations (created_at) where status = 'pending' and mode = 'transactional' and workflow_started_at is null`,
    );
  }

  override down(): void {
    this.addSql('drop index if exists invocations_unstarted');
    this.addSql(
      'alter table invocations drop column if exists workflow_started_at, drop column if exists start_lease_until',
    );
  }
}
