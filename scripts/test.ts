// `npm test`: type checking, lint, formatting (Prettier), the layer rules (.dependency-cruiser.cjs), unused
// dependencies, files and exports (knip.jsonc), then the whole mocha suite against real services. Always ends with one plain line `N passed, N failed` (the
// suite's, or a failed step's).
import { spawnSync } from 'node:child_process';

const USAGE = `usage: npm test [-- FILE...]
  Type check (tsc --noEmit), lint (eslint), formatting (Prettier --check), the layer rules
  (dependency-cruiser) and unused dependencies, files and exports (knip), then mocha over test/**/*.test.ts, or over the FILEs named (other
  arguments go to mocha as they are), against one shared stack of real services. Ends with
  one line: N passed, N failed.`;
// --help runs nothing: the steps below take minutes.
if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}

function step(name: string, command: string, args: string[]): boolean {
  process.stdout.write(`\n> ${name}: ${command} ${args.join(' ')}\n`);
  const result = spawnSync(command, args, { stdio: 'inherit', env: process.env });
  return result.status === 0;
}

const bin = (tool: string) => `node_modules/.bin/${tool}`;
/** Every folder of code, production and tooling: the layer rules (.dependency-cruiser.cjs) say what may import what. */
const LAYERED = [
  'lib',
  'x402',
  'gateway',
  'activities',
  'workflows',
  'temporal',
  'api',
  'facilitator',
  'facilitator-service',
  'contracts',
  'scripts',
  'bench',
  'examples',
  'test',
];
if (!step('type check', bin('tsc'), ['--noEmit', '-p', '.'])) {
  process.stdout.write('type check failed\n0 passed, 1 failed\n');
  process.exit(1);
}
if (!step('lint', bin('eslint'), ['.'])) {
  process.stdout.write('lint failed\n0 passed, 1 failed\n');
  process.exit(1);
}
if (!step('format', bin('prettier'), ['--check', '--log-level', 'warn', '.'])) {
  process.stdout.write('formatting differs from Prettier (npm run format fixes it)\n0 passed, 1 failed\n');
  process.exit(1);
}
if (!step('layers', bin('depcruise'), ['--config', '.dependency-cruiser.cjs', '--output-type', 'err', ...LAYERED])) {
  process.stdout.write('layer rules broken\n0 passed, 1 failed\n');
  process.exit(1);
}
// knip.jsonc: no unused dependency, file or export, nothing imported that package.json does not list.
if (!step('unused', bin('knip'), ['--no-progress'])) {
  process.stdout.write('unused dependencies, files or exports (knip.jsonc)\n0 passed, 1 failed\n');
  process.exit(1);
}
// With no arguments, the whole suite; `npm test -- test/x.test.ts` runs one file (still one stack).
const specs = process.argv.length > 2 ? process.argv.slice(2) : ['test/**/*.test.ts'];
const ok = step('tests', process.execPath, [bin('mocha'), ...specs]);
process.exit(ok ? 0 : 1);
