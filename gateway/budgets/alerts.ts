// Budget alerts: what is sent when a window's use crosses a threshold, how it is signed, and
// the tenant's signing secret.
// - The secret: one per tenant, made when its first alerting budget is created and shown then
//   only (the answer's `alert_secret`); stored envelope-encrypted under the vault keyring like a
//   managed credential (gateway/credentials/envelope.ts), never in a log, an answer after that,
//   or a workflow history (the delivery activity reads it).
// - The signature: `X-Gateway-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`,
//   the body as sent (docs/API.md "Budgets" says how to verify it and to refuse a `t` too old).
// - The delivery: a JSON POST to the budget's webhook_url through the SSRF-guarded dispatcher
//   every upstream call takes (gateway/upstream/dispatcher.ts: internal addresses refused at
//   connect, whatever the name resolves to; no redirect followed). Anything but a 2xx is a
//   failure the alert workflow retries (workflows/budget-alert.ts).
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { request, type Dispatcher } from 'undici';
import type { GatewayDb } from '../db/orm.ts';
import type { Keyring } from '../credentials/config.ts';
import { seal, unseal, type SecretAddress } from '../credentials/envelope.ts';
import { BudgetAlertSecretSchema, BudgetSchema, type Budget } from './entity.ts';
import { windowAt } from './windows.ts';

const SIGNATURE_HEADER = 'X-Gateway-Signature';

/** The envelope's address of a tenant's alert secret (binds the ciphertext to the tenant). */
export const alertSecretAddress = (tenantId: string): SecretAddress => ({
  tenantId,
  credentialId: 'budget-alerts',
  version: 1,
});

/** `t=<unix>,v1=<hex>`: the HMAC-SHA256 of `<t>.<body>` under the secret. */
export function signatureOf(secret: string, body: string, unixSeconds: number): string {
  const mac = createHmac('sha256', secret).update(`${unixSeconds}.${body}`).digest('hex');
  return `t=${unixSeconds},v1=${mac}`;
}

/** Whether `header` signs `body` under `secret`, made at most `toleranceS` from `nowS` (what a receiver checks). */
export function verifySignature(secret: string, body: string, header: string, nowS: number, toleranceS = 300): boolean {
  const parts = Object.fromEntries(header.split(',').map((p) => p.split('=', 2) as [string, string]));
  const t = Number(parts.t);
  if (!Number.isInteger(t) || Math.abs(nowS - t) > toleranceS || !parts.v1) return false;
  const expected = Buffer.from(signatureOf(secret, body, t).split('v1=')[1], 'hex');
  const given = Buffer.from(parts.v1, 'hex');
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/**
 * The tenant's alert secret when this call made it (to be shown once), else null (it exists
 * already). Two concurrent first alerting budgets make one: the second insert does nothing.
 */
export async function ensureAlertSecret(db: GatewayDb, keyring: Keyring, tenantId: string): Promise<string | null> {
  const em = db.em.fork();
  if (await em.findOne(BudgetAlertSecretSchema, { tenantId })) return null;
  const secret = `whsec_${randomBytes(32).toString('base64url')}`;
  const sealed = seal(keyring, alertSecretAddress(tenantId), secret);
  const inserted = await em.getConnection().execute<Array<{ tenant_id: string }>>(
    `insert into budget_alert_secrets (tenant_id, kek_id, wrapped_key, secret_ciphertext) values (?, ?, ?, ?)
       on conflict (tenant_id) do nothing returning tenant_id`,
    [tenantId, sealed.kekId, sealed.wrappedKey, sealed.ciphertext],
  );
  return inserted.length > 0 ? secret : null;
}

async function alertSecret(db: GatewayDb, keyring: Keyring, tenantId: string): Promise<string | null> {
  const row = await db.em.fork().findOne(BudgetAlertSecretSchema, { tenantId });
  if (!row) return null;
  return unseal(keyring, alertSecretAddress(tenantId), {
    kekId: row.kekId,
    wrappedKey: Buffer.from(row.wrappedKey),
    ciphertext: Buffer.from(row.secretCiphertext),
  });
}

/** One threshold crossed in one window of one budget: what the alert workflow is started with. */
export type AlertFacts = { budgetId: string; windowStartMs: number; threshold: number };

/** The alert's id: the same for every attempt, so a receiver can drop a repeat. */
export const alertIdOf = (a: AlertFacts) => `alert-${a.budgetId}-${a.windowStartMs}-${a.threshold}`;

function alertBody(budget: Budget, alert: AlertFacts): Record<string, unknown> {
  const start = new Date(alert.windowStartMs);
  const span = windowAt(budget.timeWindow, start, budget.createdAt);
  return {
    id: alertIdOf(alert),
    type: 'budget.threshold_crossed',
    budget_id: budget.id,
    budget_name: budget.name,
    tenant_id: budget.tenantId,
    mode: budget.mode,
    threshold: alert.threshold,
    limit: { amount: budget.limitAmount ?? null, calls: budget.limitCalls == null ? null : Number(budget.limitCalls) },
    window: budget.timeWindow,
    window_start: start.toISOString(),
    resets_at: span.resetsAt?.toISOString() ?? null,
  };
}

/** What a delivery came to: sent (2xx), or nothing to send (the budget or its webhook gone). */
export type Delivery = { outcome: 'delivered'; status: number } | { outcome: 'dropped'; reason: string };

/** The receiver did not take the alert (a non-2xx answer, no answer): retried by the workflow. */
export class AlertNotDelivered extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'AlertNotDelivered';
  }
}

export async function deliverAlert(
  deps: { db: GatewayDb; keyring: Keyring; dispatcher: Dispatcher; timeoutMs: number },
  alert: AlertFacts,
): Promise<Delivery> {
  const budget = await deps.db.em.fork().findOne(BudgetSchema, { id: alert.budgetId });
  if (!budget) return { outcome: 'dropped', reason: 'budget deleted' };
  if (!budget.webhookUrl) return { outcome: 'dropped', reason: 'no webhook_url' };
  const secret = await alertSecret(deps.db, deps.keyring, budget.tenantId);
  if (!secret) return { outcome: 'dropped', reason: 'no alert secret' };
  const body = JSON.stringify(alertBody(budget, alert));
  const signature = signatureOf(secret, body, Math.floor(Date.now() / 1000));
  let status: number;
  try {
    const answer = await request(budget.webhookUrl, {
      method: 'POST',
      dispatcher: deps.dispatcher,
      headers: {
        'content-type': 'application/json',
        'user-agent': 'agent-gateway-budget-alerts',
        [SIGNATURE_HEADER]: signature,
      },
      body,
      headersTimeout: deps.timeoutMs,
      bodyTimeout: deps.timeoutMs,
    });
    status = answer.statusCode;
    // The answer's body is not read: drained so the connection can be reused.
    await answer.body.dump({ limit: 64 * 1024 }).catch(() => undefined);
  } catch (err) {
    // The cause's class only: a message could carry the receiver's address details.
    throw new AlertNotDelivered(`webhook unreachable (${(err as Error).name})`);
  }
  if (status < 200 || status > 299) throw new AlertNotDelivered(`webhook answered ${status}`);
  return { outcome: 'delivered', status };
}
