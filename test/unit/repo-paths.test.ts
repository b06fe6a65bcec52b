// A path of the repository named in a comment or a page must exist: a file moved or renamed
// leaves its old path in the comments and docs that point readers to it, and nothing else
// fails. Read: the comments of every .ts, .cjs and .sh file and every line of README.md and
// docs/*.md, for tokens that start with a top-level folder and end in a file extension or `/`
// (`api/routes/agents.ts`, `test/unit/`). Globs are checked by the folder before their first
// wildcard and braces are expanded (`api/routes/{agents,policy}.ts`); placeholders
// (`test/x.test.ts`, `test/histories/NAME.json`) are no paths. Also: README.md's layout section
// names every top-level folder.
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';

const ROOT = resolve(import.meta.dirname, '../..');

/** The folders git ignores (.gitignore's plain `name` and `name/` lines): never the repository's, never searched. */
const IGNORED = new Set(
  readFileSync(join(ROOT, '.gitignore'), 'utf8')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => /^[\w.-]+\/?$/.test(line))
    .map((line) => line.replace(/\/$/, '')),
);

/** The repository's top-level folders: not hidden, not ignored. */
const TOP = readdirSync(ROOT, { withFileTypes: true })
  .filter((entry) => entry.isDirectory() && !entry.name.startsWith('.') && !IGNORED.has(entry.name))
  .map((entry) => entry.name)
  .sort();

/** Files under `dir` (relative to the root) whose name ends in one of `extensions`. */
function filesUnder(dir: string, extensions: string[]): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = dir ? `${dir}/${entry.name}` : entry.name;
    if (entry.isDirectory())
      return entry.name.startsWith('.') || IGNORED.has(entry.name) ? [] : filesUnder(path, extensions);
    return extensions.some((ext) => entry.name.endsWith(ext)) ? [path] : [];
  });
}

/**
 * A path-like token: a top-level folder, then path characters (braces and wildcards for globs),
 * not inside a longer path, a package name (`@x402/fetch`) or a URL.
 */
const TOKEN = new RegExp(
  `(?<![\\w@./-])(?:${TOP.map((d) => d.replace(/[-.]/g, '\\$&')).join('|')})/[\\w.*{},/-]*`,
  'g',
);

/** A placeholder segment, of a path that does not exist: in capitals (`NAME.json`, `FILE`), or one letter (`x.test.ts`). */
const PLACEHOLDER = /(^|\/)([A-Z][A-Z_]*|[a-z])(\.[\w.]+)?(\/|$)/;

/** `a/{b,c}.ts` as `a/b.ts` and `a/c.ts`. */
function expandBraces(path: string): string[] {
  const match = /\{([^{}]*)\}/.exec(path);
  if (!match) return [path];
  return match[1]
    .split(',')
    .flatMap((part) => expandBraces(path.slice(0, match.index) + part + path.slice(match.index + match[0].length)));
}

/** Whether `token` names something of the repository that exists (or is no path at all). */
function exists(token: string): boolean {
  return expandBraces(token).every((path) => {
    const glob = path.search(/[*?]/);
    // A glob: the folder it searches must exist.
    if (glob >= 0) return existsSync(join(ROOT, path.slice(0, path.lastIndexOf('/', glob) + 1)));
    return existsSync(join(ROOT, path)) && (!path.endsWith('/') || statSync(join(ROOT, path)).isDirectory());
  });
}

/** The paths `text` names: tokens ending in a file extension or `/`, trailing punctuation off. */
function pathsIn(text: string): string[] {
  return [...text.matchAll(TOKEN)]
    .map((m) => m[0].replace(/[.,]+$/, ''))
    .filter((token) => /(\.[a-z][\w]*|\/)$/.test(token));
}

/** The comment text of a line of code: a whole-line comment, or what follows ` // ` (` # ` in a shell script). */
function commentOf(line: string, shell: boolean): string | undefined {
  const trimmed = line.trim();
  if (shell) {
    if (trimmed.startsWith('#')) return trimmed;
    const at = line.indexOf(' # ');
    return at >= 0 ? line.slice(at) : undefined;
  }
  if (/^(\/\/|\/\*|\*)/.test(trimmed)) return trimmed;
  const at = line.indexOf(' // ');
  return at >= 0 ? line.slice(at) : undefined;
}

/** `file:line: path` for every path named in `file` that does not exist. */
function missingIn(file: string, lines: (line: string) => string | undefined): string[] {
  return readFileSync(join(ROOT, file), 'utf8')
    .split('\n')
    .flatMap((line, i) => {
      const text = lines(line);
      const missing = text ? pathsIn(text).filter((path) => !exists(path) && !PLACEHOLDER.test(path)) : [];
      return missing.map((path) => `${file}:${i + 1}: ${path}`);
    });
}

describe('repository paths named in comments and docs exist', () => {
  it('the scanner finds paths and tells placeholders and globs from them', () => {
    assert.deepEqual(pathsIn('see api/routes/agents.ts, test/unit/ and docs/API.md.'), [
      'api/routes/agents.ts',
      'test/unit/',
      'docs/API.md',
    ]);
    assert.deepEqual(pathsIn('@x402/fetch, https://example.com/lib/x.ts, node_modules/lib/a.ts, lib/log'), []);
    assert.deepEqual(
      pathsIn('test/x.test.ts, test/histories/NAME.json, scripts/FILE').filter((path) => !PLACEHOLDER.test(path)),
      [],
    );
    assert.ok(exists('test/**/*.test.ts'));
    assert.ok(exists('test/unit/{docs,layers}.test.ts'));
    assert.ok(!exists('test/unit/{docs,gone}.test.ts'));
    assert.ok(!exists('lib/gone.ts'));
    assert.ok(!exists('lib/log.ts/'), 'a file named as a folder');
  });

  it('every path a comment of a .ts, .cjs or .sh file names exists', () => {
    const files = filesUnder('', ['.ts', '.cjs', '.sh']);
    const missing = files.flatMap((file) => missingIn(file, (line) => commentOf(line, file.endsWith('.sh'))));
    assert.deepEqual(missing, []);
  });

  it('every path README.md and docs/*.md name exists', () => {
    const pages = ['README.md', ...filesUnder('docs', ['.md'])];
    assert.deepEqual(
      pages.flatMap((page) => missingIn(page, (line) => line)),
      [],
    );
  });

  it("README.md's layout section names every top-level folder", () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    const layout = /^## Layout\n([\s\S]*?)(?=^## |(?![\s\S]))/m.exec(readme)?.[1];
    assert.ok(layout, 'README.md has a "## Layout" section');
    const named = new Set([...layout.matchAll(/`([\w.-]+)\/`/g)].map((m) => m[1]));
    assert.deepEqual(
      TOP.filter((dir) => !named.has(dir)),
      [],
      'top-level folders the layout section does not name',
    );
  });
});
