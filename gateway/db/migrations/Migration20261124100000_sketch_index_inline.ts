import { Migration } from '@mikro-orm/migrations';

// analytics_sketch_index as one expression with no sub-select, so PostgreSQL inlines it into
// the statements that call it (the rollup trigger's, analytics_rebuild's) instead of running
// it as an SQL function, parsed again on every call: that was a tenth of the database's CPU
// on the streaming rows' connections (docs/ANALYTICS.md). Same values for every input
// (floor(log2(v)) = 63 - leading zeros = 64 - position of the first 1 bit, written out twice).
// Only the branch for v >= 128 differs between up and down.
const sketchIndexFunction = (aboveLinear: string) => `
  create or replace function analytics_sketch_index(v bigint) returns integer
  language sql immutable parallel safe as $$
    select case
      when v is null then null
      when v < 128 then greatest(v, 0)::integer
      else ${aboveLinear}
    end
  $$`;

export class Migration20261124100000_sketch_index_inline extends Migration {
  override up(): void {
    this.addSql(
      sketchIndexFunction(`(128 + (57 - position('1' in v::bit(64)::text)) * 64
                + ((v >> (58 - position('1' in v::bit(64)::text))) - 64))::integer`),
    );
  }

  override down(): void {
    // As Migration20261122100100_analytics created it.
    this.addSql(
      sketchIndexFunction(`(select (128 + (e - 7) * 64 + ((v >> (e - 6)) - 64))::integer
                from (select 64 - position('1' in v::bit(64)::text) as e) as s)`),
    );
  }
}
