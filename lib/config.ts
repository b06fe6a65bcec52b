// Configuration errors, reported together. Every loader of settings (gateway/config.ts,
// facilitator/config.ts, the observability and Temporal settings here) throws a ConfigError
// carrying one line per problem, each naming the variable and what it must be; a process
// gathers the errors of all its loaders, adds the listeners it would fail to bind (a taken
// port), and prints them all before it starts anything (reportConfigErrors). Values are never
// quoted: a problem line may be about a secret.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import type { z } from 'zod';

/** Settings that cannot work; `problems` holds one line per mistake. */
export class ConfigError extends Error {
  override name = 'ConfigError';
  readonly problems: string[];
  constructor(problems: string | string[]) {
    const list = typeof problems === 'string' ? [problems] : problems;
    super(`invalid configuration: ${list.join('; ')}`);
    this.problems = list;
  }
}

type Issue = z.core.$ZodIssue;

/** What a variable must be, from a zod issue (its own message when the schema gives one). */
function mustBe(issue: Issue): string {
  const i = issue as Issue & { expected?: string; minimum?: unknown; maximum?: unknown; values?: unknown[] };
  switch (issue.code) {
    case 'invalid_type':
      if (i.expected === 'int') return 'must be a whole number';
      if (i.expected === 'number') return 'must be a number';
      return issue.input === undefined ? 'must be set' : `must be a ${i.expected}`;
    case 'too_small':
      return issue.origin === 'string'
        ? `must be at least ${String(i.minimum)} characters`
        : `must be at least ${String(i.minimum)}`;
    case 'too_big':
      return issue.origin === 'string'
        ? `must be at most ${String(i.maximum)} characters`
        : `must be at most ${String(i.maximum)}`;
    case 'invalid_value':
      return `must be one of ${(i.values ?? []).map(String).join(', ')}`;
    case 'invalid_format':
      if (!/^Invalid/.test(issue.message)) return issue.message;
      if (issue.format === 'url') return 'must be a URL';
      return issue.format === 'regex' ? `must match ${String(issue.pattern)}` : `must be a valid ${issue.format}`;
    default:
      return issue.message;
  }
}

/**
 * The settings that are set: a variable given as an empty string (what compose and Kubernetes
 * templates write for a value they leave out) counts as unset, never as an empty path, URL or
 * number, so it takes its default or is the one-line "must be set" of a required setting.
 */
export function setSettings(env: NodeJS.ProcessEnv): Record<string, string> {
  return Object.fromEntries(
    Object.entries(env).filter((entry): entry is [string, string] => typeof entry[1] === 'string' && entry[1] !== ''),
  );
}

/** Removes the empty settings from a process's environment, before anything reads it (see setSettings). */
export function unsetEmptySettings(env: NodeJS.ProcessEnv = process.env): void {
  for (const [name, value] of Object.entries(env)) if (value === '') delete env[name];
}

/** Parses the environment with a zod schema; every failing variable is one line of a ConfigError. */
export function parseEnv<S extends z.ZodType>(schema: S, env: NodeJS.ProcessEnv): z.infer<S> {
  const parsed = schema.safeParse(setSettings(env));
  if (parsed.success) return parsed.data;
  throw new ConfigError(parsed.error.issues.map((issue) => `${issue.path.join('.')} ${mustBe(issue)}`));
}

/**
 * Runs each loader and returns their results, or throws one ConfigError with the problems of
 * all of them (a loader's plain "invalid configuration: ..." error counts as one problem).
 */
export function gatherConfig<T extends Record<string, () => unknown>>(
  loaders: T,
): { [K in keyof T]: ReturnType<T[K]> } {
  const problems: string[] = [];
  const results: Record<string, unknown> = {};
  for (const [key, load] of Object.entries(loaders)) {
    try {
      results[key] = load();
    } catch (err) {
      problems.push(...problemsOf(err));
    }
  }
  if (problems.length) throw new ConfigError(problems);
  return results as { [K in keyof T]: ReturnType<T[K]> };
}

/** The file a setting names, read at start; one that cannot be read is a problem naming the setting. */
export function readSettingFile(variable: string, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new ConfigError(`${variable}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'unreadable'})`);
  }
}

/** The problem lines of a configuration error; rethrows anything else. */
export function problemsOf(err: unknown): string[] {
  if (err instanceof ConfigError) return err.problems;
  const message = (err as Error)?.message ?? '';
  const match = /^invalid (?:[a-z]+ )?configuration: (.*)$/s.exec(message);
  if (match) return [match[1].split('\n')[0]];
  throw err;
}

/** The pino levels, for LOG_LEVEL. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** A listener the process will open: `variable` names the port setting, `hostVariable` the address. */
export type Listener = { variable: string; fallback: number; hostVariable: string; hostFallback?: string };

/** One line for each listener whose port is taken (a port the schema refuses is left to it; 0 is off). */
export async function takenPorts(listeners: Listener[], env: NodeJS.ProcessEnv): Promise<string[]> {
  const problems: string[] = [];
  for (const l of listeners) {
    const port = Number(env[l.variable] || l.fallback);
    const host = env[l.hostVariable] || l.hostFallback || '127.0.0.1';
    if (!Number.isInteger(port) || port <= 0 || port > 65535) continue;
    const error = await new Promise<NodeJS.ErrnoException | null>((done) => {
      const server = createServer();
      server.once('error', done);
      server.listen(port, host, () => server.close(() => done(null)));
    });
    if (error?.code === 'EADDRINUSE')
      problems.push(
        `${l.variable}: ${host}:${port} is taken; stop what listens there or set ${l.variable} to a free port`,
      );
    else if (error)
      problems.push(
        `${l.variable}: cannot listen on ${host}:${port} (${error.code ?? error.message}); check ${l.hostVariable}`,
      );
  }
  return problems;
}

/**
 * A process entry's settings, checked before it starts anything: the loader's problems and the
 * taken listeners together, one line each on stderr, then exit 2. DEBUG=1 adds the stack trace.
 */
export async function loadConfigOrExit<T>(
  processName: string,
  load: () => T,
  listeners: Listener[] = [],
  env: NodeJS.ProcessEnv = process.env,
): Promise<T> {
  let config: T | undefined;
  const problems: string[] = [];
  unsetEmptySettings(env);
  try {
    config = load();
  } catch (err) {
    if (env.DEBUG) process.stderr.write(`${(err as Error)?.stack ?? String(err)}\n`);
    problems.push(...problemsOf(err));
  }
  problems.push(...(await takenPorts(listeners, env)));
  if (problems.length === 0) return config as T;
  return exitWithProblems(processName, problems);
}

/** Prints the problems, one line each under a heading naming the process, and exits 2. */
export function exitWithProblems(processName: string, problems: string[]): never {
  const unique = [...new Set(problems)];
  process.stderr.write(
    `${processName}: invalid configuration (${unique.length} problem${unique.length > 1 ? 's' : ''}; nothing started):\n` +
      unique.map((p) => `  ${p}\n`).join(''),
  );
  process.exit(2);
}
