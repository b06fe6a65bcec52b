// `npm run chaos [-- <name> ...]`: the chaos scenarios of docs/CHAOS.md, in order, one summary
// line each (`PASS name: summary` / `FAIL name: reason`); exits 1 when any fails.
//
// The contract every scenario keeps:
// - It is a module `scripts/chaos/<name>.ts` exporting
//     export const scenario = { name: string, description: string, run: () => Promise<string> };
//   (the type is ChaosScenario in scripts/chaos/harness.ts).
// - `run` resolves to a one-line summary — the counts that prove the claim — and throws an Error
//   with a clear message on any violated invariant.
// - It starts and stops its own isolated system (its own data folder under .chaos-data/, free
//   ports, its own Temporal dev server, ...; scripts/chaos/harness.ts startSystem/withSystem), so
//   each scenario runs alone as well as in the sequence. Bounded in count and time, loopback only.
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { existsSync } from 'node:fs';
import type { ChaosScenario } from './harness.ts';

/** The six scenarios of issue 7, in the order they run. */
export const SCENARIOS = ['worker-kill', 'temporal-restart', 'postgres-down', 'settle-kill', 'rpc-down', 'flapping-upstream'];

async function load(name: string): Promise<ChaosScenario> {
  const file = resolve(import.meta.dirname, `${name}.ts`);
  if (!existsSync(file)) throw new Error(`no scenario module scripts/chaos/${name}.ts`);
  const mod = (await import(pathToFileURL(file).href)) as { scenario?: ChaosScenario };
  const s = mod.scenario;
  if (!s || typeof s.run !== 'function' || typeof s.name !== 'string') throw new Error(`scripts/chaos/${name}.ts does not export \`scenario = { name, description, run }\``);
  return s;
}

const asked = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const unknown = asked.filter((a) => !SCENARIOS.includes(a));
if (unknown.length) {
  process.stderr.write(`unknown scenario ${unknown.join(', ')}; the scenarios are: ${SCENARIOS.join(', ')}\n`);
  process.exit(2);
}
const names = asked.length ? asked : SCENARIOS;

const lines: string[] = [];
let failed = 0;
for (const name of names) {
  const started = Date.now();
  let line: string;
  try {
    const scenario = await load(name);
    process.stderr.write(`... ${name}: ${scenario.description}\n`);
    const summary = await scenario.run();
    line = `PASS ${name}: ${summary} [${((Date.now() - started) / 1000).toFixed(0)} s]`;
  } catch (err) {
    failed++;
    line = `FAIL ${name}: ${(err as Error).message.replace(/\s+/g, ' ')} [${((Date.now() - started) / 1000).toFixed(0)} s]`;
  }
  lines.push(line);
  process.stdout.write(`${line}\n`);
}
if (names.length > 1) process.stdout.write(`\n${lines.join('\n')}\n${names.length - failed}/${names.length} scenarios passed\n`);
process.exit(failed ? 1 : 0);
