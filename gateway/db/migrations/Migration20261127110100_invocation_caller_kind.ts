import { Migration } from '@mikro-orm/migrations';

// Who called: `token` (a /v1 bearer token: `caller` is its user claim) or `x402` (a public
// agent's payer: `caller` is `x402:<checksummed address>`). A public transactional call is polled
// with a capability handed out in its 202; only the key's SHA-256 is kept, so the table alone
// cannot be used to read another payer's call.
export class Migration20261127110100_invocation_caller_kind extends Migration {
  override up(): void {
    this.addSql(
      `alter table invocations
         add column caller_kind text not null default 'token' check (caller_kind in ('token', 'x402')),
         add column poll_key_sha256 text null`,
    );
  }

  override down(): void {
    this.addSql('alter table invocations drop column if exists poll_key_sha256, drop column if exists caller_kind');
  }
}
