import { Migration } from '@mikro-orm/migrations';

// invocations.stream_ends_by: when a paid metered streamed call's answer must have ended for its
// charge to be collected (its payer's authorization less the settle's time). The lost-stream
// sweep closes a row still running past it even while its owner's lock is held (a process hung,
// or a database session that outlived its process), charged what was measured, and the
// due-charges round settles it before the authorization lapses (gateway/invocations/stale-streams.ts,
// temporal/charges-due.ts). A nullable column without a default: adding it rewrites nothing.
export class Migration20261206190000_stream_ends_by extends Migration {
  override up(): void {
    this.addSql(`set local lock_timeout = '10s'`);
    this.addSql(`alter table invocations add column stream_ends_by timestamptz null`);
  }

  override down(): void {
    this.addSql(`alter table invocations drop column if exists stream_ends_by`);
  }
}
