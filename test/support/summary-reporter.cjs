// Mocha's spec reporter plus one plain closing line, `N passed, N failed, N skipped`,
// which is what CI reads (see docs: mocha's own summary is not read). When `npm test` runs
// both layers (scripts/test.ts) it names a file in MOCHA_SUMMARY_FILE: the counts go there
// as JSON instead, and the script prints the one line for both runs.
const { writeFileSync } = require('node:fs');
const Mocha = require('mocha');

class SpecWithSummary extends Mocha.reporters.Spec {
  constructor(runner, options) {
    super(runner, options);
    runner.once('end', () => {
      const { passes, failures, pending } = runner.stats;
      if (process.env.MOCHA_SUMMARY_FILE)
        writeFileSync(process.env.MOCHA_SUMMARY_FILE, JSON.stringify({ passes, failures, pending }));
      else process.stdout.write(`${passes} passed, ${failures} failed, ${pending} skipped\n`);
    });
  }
}

module.exports = SpecWithSummary;
