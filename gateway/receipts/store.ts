// Receipt rows, and the facts a receipt is built from (the invocation row and its bodies'
// digests). One receipt per invocation: the first insert wins, a retried activity reads the
// one already signed instead of signing a second, different one.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { ReceiptFields } from './receipt.ts';

type Row = Record<string, any>;

export type StoredReceipt = { invocationId: string; agentId: string; kid: string; jws: string; createdAt: Date };

/** What a receipt says of a terminal row, from its columns (both signing paths build it here). */
export type ReceiptFacts = {
  id: string;
  tenantId: string;
  agentId: string;
  status: 'succeeded' | 'failed';
  requestSha256: string | null;
  responseSha256: string | null;
  upstreamStatus: number | null;
  latencyMs: number | null;
  completedAt: Date;
  paymentNetwork?: string | null;
  paymentAsset?: string | null;
  paymentPayer?: string | null;
  paymentAmount?: string | null;
  paymentTransaction?: string | null;
  paymentScheme?: string | null;
  paymentChannel?: string | null;
};

export function receiptFieldsOf(f: ReceiptFacts): Omit<ReceiptFields, 'iat'> {
  const paid = f.paymentNetwork != null && f.paymentPayer != null && f.paymentAmount != null;
  return {
    ver: 1,
    invocation_id: f.id,
    tenant_id: f.tenantId,
    agent_id: f.agentId,
    status: f.status,
    request_sha256: f.requestSha256,
    response_sha256: f.responseSha256,
    upstream_status: f.upstreamStatus,
    latency_ms: f.latencyMs,
    completed_at: f.completedAt.toISOString(),
    payment: paid
      ? {
          network: f.paymentNetwork!,
          asset: f.paymentAsset ?? null,
          payer: f.paymentPayer!,
          amount: f.paymentAmount!,
          transaction: f.paymentTransaction ?? null,
          ...(f.paymentScheme ? { scheme: f.paymentScheme } : {}),
          ...(f.paymentChannel ? { channel: f.paymentChannel } : {}),
        }
      : null,
  };
}

export function createReceiptStore(orm: MikroORM) {
  const sql = (query: string, params: unknown[] = []) => orm.em.getConnection().execute<Row[]>(query, params);

  return {
    /** What a terminal invocation's receipt says; null while it is not terminal or absent. */
    async factsFor(invocationId: string): Promise<ReceiptFacts | null> {
      const rows = await sql(
        `select i.id, i.tenant_id, i.agent_id, i.status, i.upstream_status, i.latency_ms,
                (extract(epoch from i.completed_at) * 1000)::bigint as completed_ms,
                coalesce(i.request_sha256, rq.sha256) as request_sha256, coalesce(i.response_sha256, rs.sha256) as response_sha256,
                i.payment_network, i.payment_asset, i.payment_payer, i.payment_amount, i.payment_transaction,
                i.payment_scheme, i.payment_channel
         from invocations i
         left join bodies rq on rq.id = i.request_body_id
         left join bodies rs on rs.id = i.response_body_id
         where i.id = ? and i.status in ('succeeded', 'failed')`,
        [invocationId],
      );
      if (rows.length === 0) return null;
      const r = rows[0];
      return {
        id: r.id,
        tenantId: r.tenant_id,
        agentId: r.agent_id,
        status: r.status,
        requestSha256: r.request_sha256 ?? null,
        responseSha256: r.response_sha256 ?? null,
        upstreamStatus: r.upstream_status === null ? null : Number(r.upstream_status),
        latencyMs: r.latency_ms === null ? null : Number(r.latency_ms),
        completedAt: new Date(Number(r.completed_ms)),
        paymentNetwork: r.payment_network ?? null,
        paymentAsset: r.payment_asset ?? null,
        paymentPayer: r.payment_payer ?? null,
        paymentAmount: r.payment_amount ?? null,
        paymentTransaction: r.payment_transaction ?? null,
        paymentScheme: r.payment_scheme ?? null,
        paymentChannel: r.payment_channel ?? null,
      };
    },

    /** Saves the receipt unless one exists; returns the stored one either way. */
    async save(r: {
      invocationId: string;
      tenantId: string;
      agentId: string;
      kid: string;
      jws: string;
    }): Promise<StoredReceipt> {
      await sql(
        `insert into receipts (invocation_id, tenant_id, agent_id, kid, jws) values (?, ?, ?, ?, ?) on conflict (invocation_id) do nothing`,
        [r.invocationId, r.tenantId, r.agentId, r.kid, r.jws],
      );
      return (await this.get(r.tenantId, r.invocationId))!;
    },

    async get(tenantId: string, invocationId: string): Promise<StoredReceipt | null> {
      const rows = await sql(
        `select invocation_id, agent_id, kid, jws, (extract(epoch from created_at) * 1000)::bigint as created_ms
         from receipts where tenant_id = ? and invocation_id = ?`,
        [tenantId, invocationId],
      );
      if (rows.length === 0) return null;
      const r = rows[0];
      return {
        invocationId: r.invocation_id,
        agentId: r.agent_id,
        kid: r.kid,
        jws: r.jws,
        createdAt: new Date(Number(r.created_ms)),
      };
    },

    async exists(invocationId: string): Promise<boolean> {
      return (await sql(`select 1 from receipts where invocation_id = ?`, [invocationId])).length > 0;
    },
  };
}
