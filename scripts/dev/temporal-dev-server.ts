// Starts `temporal server start-dev` on a SQLite file, with the namespace and the custom
// search attributes registered (they are created only together with the namespace).
import { spawn, type ChildProcess } from 'node:child_process';
import { Connection } from '@temporalio/client';
import { ALL_SEARCH_ATTRIBUTES } from '../../temporal/search-attributes.ts';
import { waitFor } from '../lib/ports.ts';

export type DevServer = { address: string; uiUrl: string | null; child: ChildProcess; stop(): Promise<void> };

const TYPE_NAMES: Record<string, string> = {
  KEYWORD: 'Keyword',
  TEXT: 'Text',
  INT: 'Int',
  DOUBLE: 'Double',
  BOOL: 'Bool',
  DATETIME: 'Datetime',
  KEYWORD_LIST: 'KeywordList',
};

export async function startTemporalDevServer(opts: {
  binary: string;
  dbFile: string;
  port: number;
  uiPort?: number;
  namespace: string;
  /** Register the custom search attributes with the namespace (default true; a test of a bare cluster says false). */
  searchAttributes?: boolean;
  onOutput?: (line: string) => void;
}): Promise<DevServer> {
  const args = [
    'server',
    'start-dev',
    '--db-filename',
    opts.dbFile,
    '--ip',
    '127.0.0.1',
    '--port',
    String(opts.port),
    '--namespace',
    opts.namespace,
    '--log-level',
    'warn',
  ];
  // WAL journaling roughly halves the dev server's per-write latency (measured in bench:settle).
  args.push('--sqlite-pragma', 'journal_mode=wal', '--sqlite-pragma', 'synchronous=normal');
  if (opts.uiPort) args.push('--ui-port', String(opts.uiPort));
  else args.push('--headless');
  if (opts.searchAttributes !== false)
    for (const key of ALL_SEARCH_ATTRIBUTES) args.push('--search-attribute', `${key.name}=${TYPE_NAMES[key.type]}`);

  const child = spawn(opts.binary, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  for (const stream of [child.stdout, child.stderr])
    stream?.on('data', (chunk: Buffer) => opts.onOutput?.(chunk.toString()));
  // One that exits at start fails at once; one that never answers is stopped, not left running
  // behind the error.
  const gone = new AbortController();
  child.once('exit', (code) => gone.abort(new Error(`temporal dev server exited with code ${code}`)));

  const address = `127.0.0.1:${opts.port}`;
  try {
    await waitFor(
      'temporal dev server',
      async () => {
        const connection = await Connection.connect({ address, connectTimeout: '1 second' });
        try {
          // Bounded per try, like the connect: a port that accepts and never answers must not
          // hold this connection open past the wait.
          await connection.withDeadline(Date.now() + 2_000, () =>
            connection.workflowService.describeNamespace({ namespace: opts.namespace }),
          );
          return true;
        } finally {
          await connection.close();
        }
      },
      90_000,
      gone.signal,
    );
  } catch (err) {
    await stopChild(child);
    throw err;
  }

  return {
    address,
    uiUrl: opts.uiPort ? `http://127.0.0.1:${opts.uiPort}` : null,
    child,
    stop: () => stopChild(child),
  };
}

export function stopChild(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const force = setTimeout(() => child.kill('SIGKILL'), graceMs);
    child.once('exit', () => {
      clearTimeout(force);
      resolve();
    });
    child.kill('SIGTERM');
  });
}
