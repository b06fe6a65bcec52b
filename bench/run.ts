// `npm run bench [-- NAME[=ARGS] ...]`: runs the benchmarks one after another and rewrites their
// figures in docs/BENCHMARKS.md (bench/report.ts), with the machine and the versions.
//   npm run bench                         all: analytics, proxy, budget, mcp-federation, settle, paid, throughput
//   npm run bench -- proxy throughput     only these; the other sections are kept as they are
//   npm run bench -- "analytics=--invocations 100000"   with arguments for that benchmark
//
// Each benchmark runs in its own process (`node bench/NAME.ts --json FILE`), exactly as
// `npm run bench:NAME` runs it: each starts and removes its own stack (Temporal dev server,
// databases, anvil, child servers), so one process each keeps them apart — no heap, JIT state,
// sockets or leaked handles carried from one benchmark into the next one's figures, a crash or
// hang costs one section rather than the run, and the figures are the ones the single command
// prints. The result comes back as the JSON file; the output streams through as it is printed.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { collectEnvironment } from './environment.ts';
import { updateReport, type Section } from './report.ts';
import type { BenchResult } from './result.ts';
import { parseCommand, usageExit } from '../scripts/lib/cli.ts';
import { startStep } from '../scripts/lib/progress.ts';

const ALL = ['analytics', 'proxy', 'budget', 'mcp-federation', 'settle', 'paid', 'throughput'];
const REPORT = 'docs/BENCHMARKS.md';

const USAGE = `usage: npm run bench [-- [--write] [NAME[=ARGS] ...]]
  Runs the benchmarks (all, or those named: ${ALL.join(', ')}) and prints their figures;
  --write also rewrites their sections of ${REPORT}.`;
const { values, positionals } = parseCommand({
  usage: USAGE,
  options: { write: { type: 'boolean' } },
  allowPositionals: true,
});
const write = values.write === true;
const requested = positionals.map((arg) => {
  const [name, ...rest] = arg.split('=');
  if (!ALL.includes(name)) usageExit(USAGE, `unknown benchmark "${name}"`);
  return { name, args: rest.join('=').split(' ').filter(Boolean) };
});
const runs = requested.length
  ? ALL.flatMap((name) => requested.filter((r) => r.name === name))
  : ALL.map((name) => ({ name, args: [] as string[] }));

function runOne(name: string, args: string[], jsonFile: string): Promise<BenchResult> {
  const started = new Date().toISOString();
  const t0 = performance.now();
  const command = `npm run bench:${name}${args.length ? ` -- ${args.join(' ')}` : ''}`;
  const step = startStep(`bench ${name}`, command);
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [`bench/${name}.ts`, ...args, '--json', jsonFile], { stdio: 'inherit' });
    child.once('exit', (code, signal) => {
      try {
        if (code === 0) {
          const result = JSON.parse(readFileSync(jsonFile, 'utf8')) as BenchResult;
          step.end();
          return resolve(result);
        }
      } catch {
        // no result written: reported as a failure below
      }
      step.fail();
      resolve({
        bench: name,
        command,
        setup: '',
        startedAt: started,
        seconds: Math.round((performance.now() - t0) / 1000),
        tables: [],
        checks: [],
        notes: [],
        error: `\`${command}\` exited with ${signal ?? `code ${code}`}`,
      });
    });
  });
}

const env = await collectEnvironment();
process.stdout.write(
  `# npm run bench: ${runs.map((r) => r.name).join(', ')} on ${env.machine.cores} × ${env.machine.cpu}, commit ${env.commit}\n`,
);
const dir = mkdtempSync(join(tmpdir(), 'gw-bench-'));
const fresh: Section[] = [];
try {
  for (const r of runs) {
    process.stdout.write(`\n# ── ${r.name} ──\n`);
    const result = await runOne(r.name, r.args, join(dir, `${r.name}.json`));
    fresh.push({ result, env });
    // Written after each benchmark, so an interrupted run keeps what it measured.
    if (write) writeFileSync(REPORT, updateReport(readFileSync(REPORT, 'utf8'), fresh, env));
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
const failed = fresh.filter((s) => s.result.error);
const checks = fresh.flatMap((s) => s.result.checks);
process.stdout.write(
  `\n# ${write ? `${REPORT} updated` : `not written (--write rewrites ${REPORT})`}: ${fresh.length} benchmark(s), ${checks.filter((c) => c.pass === true).length} targets met, ${checks.filter((c) => c.pass === false).length} missed${failed.length ? `, FAILED: ${failed.map((s) => s.result.bench).join(', ')}` : ''}\n`,
);
process.exitCode = failed.length ? 1 : 0;
