// What every operator command shares: `--help` prints its usage and exits 0; an unknown or
// malformed argument (an unknown flag, a missing or bad value) prints one line naming it and
// where the usage is, and exits 2; a mistake the user can fix
// (a missing file, a bad setting) prints one line and exits 2; anything else prints one line
// naming its kind and exits 1. No stack trace reaches the user unless DEBUG is set.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { unsetEmptySettings } from '../../lib/config.ts';

/** A mistake the user can fix: reported as its message alone, exit 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}

type Options = NonNullable<ParseArgsConfig['options']>;

export type CommandSpec<O extends Options> = {
  /** The command's usage text, printed by --help; its first `npm run NAME` names the command. */
  usage: string;
  options?: O;
  allowPositionals?: boolean;
  /** Raw arguments (default: process.argv after the script). */
  args?: string[];
};

/** Parses the command line; answers --help and argument errors itself (and exits). */
export function parseCommand<O extends Options>(spec: CommandSpec<O>) {
  // A command reads its settings as the processes do: an empty one is unset.
  unsetEmptySettings();
  const args = spec.args ?? process.argv.slice(2);
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write(`${spec.usage.trimEnd()}\n`);
    process.exit(0);
  }
  try {
    return parseArgs({
      args,
      options: spec.options ?? ({} as O),
      allowPositionals: spec.allowPositionals ?? false,
      strict: true,
    });
  } catch (err) {
    // node:util's advice on positionals that start with '-' is noise here.
    return usageExit(spec.usage, (err as Error).message.replace(/\. To specify a positional argument.*$/s, ''));
  }
}

/** The command's name, from its usage text (`usage: npm run NAME ...`, `usage: npm start`). */
function commandName(usage: string): string {
  return /npm (?:run (\S+)|(start|test))/.exec(usage)?.slice(1).find(Boolean) ?? 'command';
}

/** One line naming the mistake and where the usage is; exit 2. */
export function usageExit(usage: string, message: string): never {
  const name = commandName(usage);
  const help = name === 'start' || name === 'test' ? `npm ${name} -- --help` : `npm run ${name} -- --help`;
  process.stderr.write(`${name}: ${firstLine(message)} (usage: ${help})\n`);
  process.exit(2);
}

/**
 * Runs a command's body: a UsageError (or a configuration error, whose message starts with
 * "invalid configuration") is one line and exit 2; any other error is one line and exit 1.
 */
export async function runCommand(name: string, body: () => Promise<number | void>): Promise<never> {
  let code: number;
  try {
    code = (await body()) ?? 0;
  } catch (err) {
    const error = err as Error;
    if (process.env.DEBUG) process.stderr.write(`${error.stack ?? String(err)}\n`);
    if (err instanceof UsageError || /^invalid configuration/.test(error.message ?? '')) {
      process.stderr.write(`${name}: ${firstLine(error.message)}\n`);
      code = 2;
    } else {
      process.stderr.write(`${name} failed: ${firstLine(error.message || error.name || String(err))}\n`);
      code = 1;
    }
  }
  process.exit(code);
}

/**
 * For a command whose body runs at the top level: an error nothing caught (a database that does
 * not answer, say) is one line and exit 1 instead of a stack trace.
 */
export function reportUncaught(name: string): void {
  const report = (err: unknown) => {
    const error = err as Error;
    if (process.env.DEBUG) process.stderr.write(`${error?.stack ?? String(err)}\n`);
    process.stderr.write(`${name} failed: ${firstLine(error?.message || String(err))}\n`);
    process.exit(1);
  };
  process.on('uncaughtException', report);
  process.on('unhandledRejection', report);
}

function firstLine(text: string): string {
  return text.split('\n')[0]?.trim() || 'error';
}
