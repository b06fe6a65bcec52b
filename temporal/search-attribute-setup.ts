// Makes sure the namespace has the project's custom search attributes before a process relies
// on them: a workflow started with an unknown attribute fails, so a fresh cluster would fail
// every call. Missing ones are registered through the operator service (idempotent; replicas
// racing each other all end up satisfied). Where that is not allowed (Temporal Cloud, a role
// without operator rights) the process stops at start with one line naming the attributes and
// the command that creates them.
import { Connection } from '@temporalio/client';
import { ALL_SEARCH_ATTRIBUTES } from './search-attributes.ts';
import { describeConnection, type TemporalConnectionOptions } from '../lib/temporal-connection.ts';

// temporal.api.enums.v1.IndexedValueType, by the SDK's SearchAttributeType names.
const INDEXED_VALUE_TYPE: Record<string, number> = {
  TEXT: 1,
  KEYWORD: 2,
  INT: 3,
  DOUBLE: 4,
  BOOL: 5,
  DATETIME: 6,
  KEYWORD_LIST: 7,
};
const CLI_TYPE: Record<string, string> = {
  TEXT: 'Text',
  KEYWORD: 'Keyword',
  INT: 'Int',
  DOUBLE: 'Double',
  BOOL: 'Bool',
  DATETIME: 'Datetime',
  KEYWORD_LIST: 'KeywordList',
};

class SearchAttributesMissing extends Error {
  override name = 'SearchAttributesMissing';
}

async function missingIn(connection: Connection, namespace: string): Promise<typeof ALL_SEARCH_ATTRIBUTES> {
  const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace });
  const known = customAttributes ?? {};
  return ALL_SEARCH_ATTRIBUTES.filter((key) => known[key.name] === undefined);
}

/** The attributes this call registered (empty when all were there). */
export async function ensureSearchAttributes(connection: Connection, namespace: string): Promise<string[]> {
  let missing;
  try {
    missing = await missingIn(connection, namespace);
  } catch (err) {
    throw unreachable(namespace, err);
  }
  if (missing.length === 0) return [];
  const searchAttributes = Object.fromEntries(missing.map((key) => [key.name, INDEXED_VALUE_TYPE[key.type]]));
  let refusal: unknown;
  try {
    await connection.operatorService.addSearchAttributes({ namespace, searchAttributes });
  } catch (err) {
    // Another replica may have added them first; what counts is whether they exist now.
    refusal = err;
  }
  const still = await missingIn(connection, namespace).catch(() => missing);
  if (still.length === 0) return missing.map((key) => key.name);
  const command = `temporal operator search-attribute create --namespace ${namespace} ${still.map((key) => `--name ${key.name} --type ${CLI_TYPE[key.type]}`).join(' ')}`;
  const why = refusal ? ` (${grpcReason(refusal)})` : '';
  throw new SearchAttributesMissing(
    `Temporal namespace ${namespace} lacks the search attributes ${still.map((key) => key.name).join(', ')} and this process may not create them${why}; create them with: ${command} (Temporal Cloud: tcld namespace search-attributes add)`,
  );
}

function unreachable(namespace: string, err: unknown): Error {
  return new SearchAttributesMissing(
    `could not read the search attributes of Temporal namespace ${namespace} (${grpcReason(err)})`,
  );
}

function grpcReason(err: unknown): string {
  const e = err as { code?: number; details?: string; message?: string };
  return (e.details || e.message || String(err)).split('\n')[0];
}

/**
 * Start-up check for a process entry: ensures the attributes over a short-lived connection, and
 * ends the process with one line on stderr when they are missing and cannot be created.
 */
export async function requireSearchAttributes(
  settings: { connection: TemporalConnectionOptions; namespace: string },
  log: { info(obj: object, msg: string): void },
): Promise<void> {
  let connection: Connection | undefined;
  try {
    connection = await Connection.connect({ ...settings.connection, connectTimeout: '10 seconds' });
    const added = await ensureSearchAttributes(connection, settings.namespace);
    if (added.length) log.info({ namespace: settings.namespace, added }, 'search attributes registered');
  } catch (err) {
    const message =
      err instanceof SearchAttributesMissing
        ? err.message
        : `Temporal at ${describeConnection(settings.connection)} did not answer: ${grpcReason(err)}`;
    process.stderr.write(`${message}\n`);
    process.exit(1);
  } finally {
    await connection?.close().catch(() => undefined);
  }
}
