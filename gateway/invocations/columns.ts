// The invocations table as the proxy's raw statements write it (the accept commit,
// gateway/invocations/accept.ts; the streaming rows, gateway/invocations/stream-records.ts): one mapping from a row's
// fields to column names, placeholders and parameter values, so the writers list fields and
// never spell columns. Names come from MikroORM's naming strategy, the one the entities use.
import { UnderscoreNamingStrategy } from '@mikro-orm/core';
import type { Invocation } from '../db/entities.ts';

/** A row's fields: the entity's, and the columns only the raw writers set. */
export type InvocationFields = Invocation & {
  /** SHA-256 (hex) of the request body: streaming rows, which store no body. */
  requestSha256: string | null;
  /** The row session that writes a streaming row (gateway/invocations/row-session.ts). */
  owner: string | null;
};

/** A field's name (the entity type also carries MikroORM's symbol keys). */
export type InvocationField = Extract<keyof InvocationFields, string>;

export type InvocationColumnSet<K extends InvocationField> = {
  /** Column names, in the order given. */
  names: string[];
  /** One `?` placeholder per column, with its cast where the driver needs one (JSON as jsonb). */
  placeholders: string[];
  /** A row's parameter values, in column order: an absent field is null, a JSON field its text. */
  values(row: { [F in K]?: InvocationFields[F] | null }): unknown[];
};

const naming = new UnderscoreNamingStrategy();
const JSON_FIELDS: ReadonlySet<string> = new Set<InvocationField>(['requestHeaders', 'meterReading']);

export function invocationColumns<K extends InvocationField>(fields: readonly K[]): InvocationColumnSet<K> {
  return {
    names: fields.map((f) => naming.propertyToColumnName(f)),
    placeholders: fields.map((f) => (JSON_FIELDS.has(f) ? '?::jsonb' : '?')),
    values: (row) =>
      fields.map((f) => {
        const value = row[f];
        if (value === undefined || value === null) return null;
        return JSON_FIELDS.has(f) ? JSON.stringify(value) : value;
      }),
  };
}

/** What every writer of a new row sets: the call as it was admitted (accept.ts, records.ts add their own). */
export const ADMITTED_CALL_FIELDS = [
  'id',
  'tenantId',
  'agentId',
  'mode',
  'status',
  'requestId',
  'caller',
  'callerKind',
  'model',
  'contentType',
  'requestBytes',
  'attempts',
  'mcpMethod',
  'mcpTool',
  'mcpServerId',
  'a2aMethod',
  'a2aSkill',
  'paymentNetwork',
  'paymentAsset',
  'paymentAmount',
  'paymentPayer',
  'paymentNonce',
  'paymentTransaction',
  'paymentScheme',
  'paymentMaxAmount',
  'paymentChannel',
  'createdAt',
  'updatedAt',
] as const satisfies readonly InvocationField[];
