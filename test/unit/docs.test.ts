// The documentation speaks of the repository only: every relative link in README.md and docs/
// names a file of the repository (no `../` out of it), and no page uses the words of how the
// work was organised ("issue 7", "session 4", "the lead", …) instead of what they meant.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '../..');
const PAGES = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];
const INTERNAL = [/\bissue (#?\d+|'s)/i, /\bsessions? \d/i, /\bthe lead\b/i, /\bhelpers'/i, /\bwip-[a-z]\b/i];

describe('docs: links stay in the repository, words speak of the project', () => {
  for (const page of PAGES) {
    it(`${page}: every relative link names a file of the repository`, () => {
      const text = readFileSync(join(ROOT, page), 'utf8');
      const targets = [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]);
      for (const target of targets) {
        if (/^(https?:|mailto:|#)/.test(target)) continue;
        const file = resolve(ROOT, dirname(page), target.split('#')[0]);
        assert.ok(!relative(ROOT, file).startsWith('..'), `${page} links out of the repository: ${target}`);
        assert.ok(existsSync(file), `${page} links to a missing file: ${target}`);
      }
      assert.doesNotMatch(text, /\.\.\/shared\//, `${page} names a file outside the repository`);
    });

    it(`${page}: no internal jargon`, () => {
      const lines = readFileSync(join(ROOT, page), 'utf8').split('\n');
      const hits = lines.flatMap((line, i) =>
        INTERNAL.some((re) => re.test(line)) ? [`${page}:${i + 1}: ${line}`] : [],
      );
      assert.deepEqual(hits, []);
    });
  }
});
