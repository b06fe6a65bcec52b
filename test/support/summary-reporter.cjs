// Mocha's spec reporter plus one plain closing line, `N passed, N failed, N skipped`,
// which is what CI reads (see docs: mocha's own summary is not read). When `npm test` runs
// both layers (scripts/test.ts) it names a file in MOCHA_SUMMARY_FILE: the counts go there
// as JSON instead, and the script prints the one line for both runs. MOCHA_TIMINGS_FILE
// names a file for each top-level suite's wall time and each test's duration (JSON), to
// find where a run's time goes.
const { writeFileSync } = require('node:fs');
const { relative } = require('node:path');
const Mocha = require('mocha');

class SpecWithSummary extends Mocha.reporters.Spec {
  constructor(runner, options) {
    super(runner, options);
    const timingsFile = process.env.MOCHA_TIMINGS_FILE;
    if (timingsFile) recordTimings(runner, timingsFile);
    runner.once('end', () => {
      const { passes, failures, pending } = runner.stats;
      if (process.env.MOCHA_SUMMARY_FILE)
        writeFileSync(process.env.MOCHA_SUMMARY_FILE, JSON.stringify({ passes, failures, pending }));
      else process.stdout.write(`${passes} passed, ${failures} failed, ${pending} skipped\n`);
    });
  }
}

function recordTimings(runner, timingsFile) {
  const files = {};
  const tests = [];
  const started = new Map();
  const runStart = Date.now();
  const name = (file) => (file ? relative(process.cwd(), file) : '(root)');
  runner.on('suite', (suite) => {
    if (suite.parent?.root) started.set(suite, { wall: Date.now(), cpu: process.cpuUsage() });
  });
  runner.on('suite end', (suite) => {
    const start = started.get(suite);
    if (!start) return;
    const cpu = process.cpuUsage(start.cpu);
    const file = (files[name(suite.file)] ??= { wallMs: 0, cpuMs: 0, tests: 0 });
    file.wallMs += Date.now() - start.wall;
    file.cpuMs += Math.round((cpu.user + cpu.system) / 1000);
  });
  runner.on('test end', (test) => {
    const file = (files[name(test.file)] ??= { wallMs: 0, cpuMs: 0, tests: 0 });
    file.tests += 1;
    tests.push({ file: name(test.file), title: test.fullTitle(), ms: test.duration ?? 0, state: test.state });
  });
  runner.on('hook end', (hook) => {
    if (hook.duration > 2000)
      tests.push({ file: name(hook.file), title: hook.fullTitle(), ms: hook.duration, state: 'hook' });
  });
  runner.once('end', () => {
    writeFileSync(timingsFile, JSON.stringify({ totalMs: Date.now() - runStart, files, tests }, null, 1));
  });
}

module.exports = SpecWithSummary;
