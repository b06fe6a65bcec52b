// `npm run chaos [-- <name> ...]`: the chaos scenarios of docs/CHAOS.md, in order, one summary
// line each (`PASS name: summary` / `FAIL name: reason`); exits 1 when any fails.
//
// The contract every scenario keeps:
// - It is a module `scripts/chaos/<name>.ts` exporting
//     export const scenario = { name: string, description: string, run: () => Promise<string> };
//   (the type is ChaosScenario in scripts/chaos/report.ts).
// - `run` resolves to a one-line summary — the counts that prove the claim — and throws an Error
//   with a clear message on any violated invariant.
// - It starts and stops its own isolated system (its own data folder under .chaos-data/, free
//   ports, its own Temporal dev server, ...; scripts/chaos/system.ts startSystem/withSystem), so
//   each scenario runs alone as well as in the sequence. Bounded in count and time, loopback only.
//
// Each scenario runs in a child process of its own, in a process group of its own: a scenario
// that crashes (an unhandled rejection; solc-js, loaded when the token contract is compiled,
// turns those into a throw) or overruns SCENARIO_TIMEOUT_MS is reported as FAIL, and whatever
// it had started (dev servers, app processes) is killed with its group instead of leaking.
import { spawn } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { existsSync } from 'node:fs';
import type { ChaosScenario } from './harness.ts';
import { parseCommand, usageExit } from '../lib/cli.ts';

/** The six chaos scenarios (docs/CHAOS.md), in the order they run. */
export const SCENARIOS = [
  'worker-kill',
  'temporal-restart',
  'postgres-down',
  'settle-kill',
  'rpc-down',
  'flapping-upstream',
];
const SCENARIO_TIMEOUT_MS = Number(process.env.CHAOS_SCENARIO_TIMEOUT_MS ?? 20 * 60_000);
const RESULT_MARK = 'CHAOS-RESULT ';
const CHILD_VARIABLE = 'CHAOS_RUN_SCENARIO';

async function load(name: string): Promise<ChaosScenario> {
  const file = resolve(import.meta.dirname, `${name}.ts`);
  if (!existsSync(file)) throw new Error(`no scenario module scripts/chaos/${name}.ts`);
  const mod = (await import(pathToFileURL(file).href)) as { scenario?: ChaosScenario };
  const s = mod.scenario;
  if (!s || typeof s.run !== 'function' || typeof s.name !== 'string')
    throw new Error(`scripts/chaos/${name}.ts does not export \`scenario = { name, description, run }\``);
  return s;
}

/** In the child: runs one scenario and prints its result on one marked line. */
async function runHere(name: string): Promise<never> {
  let result: { ok: boolean; text: string };
  try {
    const scenario = await load(name);
    process.stderr.write(`... ${name}: ${scenario.description}\n`);
    result = { ok: true, text: await scenario.run() };
  } catch (err) {
    result = { ok: false, text: (err as Error).message };
  }
  process.stdout.write(`${RESULT_MARK}${JSON.stringify(result)}\n`);
  process.exit(result.ok ? 0 : 1);
}

/** In the runner: one scenario in its own process group; always resolves to its result. */
function runChild(name: string): Promise<{ ok: boolean; text: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [import.meta.filename], {
      env: { ...process.env, [CHILD_VARIABLE]: name },
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let result: { ok: boolean; text: string } | null = null;
    const tail: string[] = [];
    let out = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      for (let i = out.indexOf('\n'); i >= 0; i = out.indexOf('\n')) {
        const line = out.slice(0, i);
        out = out.slice(i + 1);
        if (line.startsWith(RESULT_MARK))
          result = JSON.parse(line.slice(RESULT_MARK.length)) as { ok: boolean; text: string };
        else process.stderr.write(`${line}\n`);
      }
    });
    child.stderr.on('data', (c: Buffer) => {
      process.stderr.write(c);
      tail.push(
        ...c
          .toString()
          .split('\n')
          .filter((l) => l.trim()),
      );
      tail.splice(0, Math.max(0, tail.length - 8));
    });
    const killGroup = () => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // the group is already gone
      }
    };
    // Ctrl-C or SIGTERM to the runner: the scenario gets SIGTERM (its harness stops its servers
    // and drops its databases, then exits), and its whole group SIGKILL if still there after 20 s.
    const onSignal = (signal: NodeJS.Signals) => {
      stopping = true;
      process.stderr.write(`\n${signal}: stopping scenario ${name}\n`);
      try {
        process.kill(child.pid!, 'SIGTERM');
      } catch {
        // the group is already gone
      }
      setTimeout(killGroup, 20_000).unref();
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    const timer = setTimeout(() => {
      result = { ok: false, text: `did not finish within ${SCENARIO_TIMEOUT_MS / 1000} s` };
      killGroup();
    }, SCENARIO_TIMEOUT_MS);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      // Whatever the scenario left running (it crashed before its cleanup) goes with its group.
      killGroup();
      const crash = tail.find((l) => /Error|error:/.test(l)) ?? tail.at(-1) ?? '';
      done(result ?? { ok: false, text: `crashed (${signal ?? `exit code ${code}`}): ${crash.trim()}` });
    });
  });
}

// The runner names the scenario its child runs in the environment, not on the command line:
// the command line is the user's, parsed strictly below.
const childScenario = process.env[CHILD_VARIABLE];
if (childScenario) {
  delete process.env[CHILD_VARIABLE];
  await runHere(childScenario);
}

const USAGE = `usage: npm run chaos [-- NAME...]
  Runs the chaos scenarios (all, or those named), each on its own isolated system; one PASS/FAIL
  line each (docs/CHAOS.md). Ctrl-C stops the running scenario and everything it started.
  scenarios: ${SCENARIOS.join(', ')}`;
const { positionals: asked } = parseCommand({ usage: USAGE, allowPositionals: true });
const unknown = asked.filter((a) => !SCENARIOS.includes(a));
if (unknown.length) usageExit(USAGE, `unknown scenario ${unknown.join(', ')}`);
const names = asked.length ? asked : SCENARIOS;

const lines: string[] = [];
let stopping = false;
let failed = 0;
for (const name of names) {
  if (stopping) break;
  const started = Date.now();
  const result = await runChild(name);
  if (!result.ok) failed++;
  const line = `${result.ok ? 'PASS' : 'FAIL'} ${name}: ${result.text.replace(/\s+/g, ' ')} [${((Date.now() - started) / 1000).toFixed(0)} s]`;
  lines.push(line);
  process.stdout.write(`${line}\n`);
}
if (names.length > 1)
  process.stdout.write(`\n${lines.join('\n')}\n${names.length - failed}/${names.length} scenarios passed\n`);
process.exit(stopping ? 130 : failed ? 1 : 0);
