// The web console's bundle (console/, served by the API at /console: api/console/routes.ts).
// esbuild bundles console/src/main.tsx (Preact, uPlot and the console's own code and styles)
// into content-hashed files under assets/, and writes index.html naming them. A manifest keyed
// by the hash of every input (the console's files, the bundled packages' versions, this file)
// says what a folder holds: a build whose inputs did not change is not redone (npm start, the
// test stack), and a folder keyed by that hash is written once and shared (every shard of a
// test run, every run until the console changes).
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const SOURCE = join(ROOT, 'console');
/** The packages the bundle holds, and the bundler: a new version is a new build. */
const PACKAGES = ['preact', 'uplot', 'esbuild'];

/** Where `npm run build` and `npm start` write and the API looks (CONSOLE_DIR), unless told otherwise. */
export const defaultConsoleDir = join(ROOT, 'dist', 'console');

export type ConsoleBuild = { dir: string; hash: string; files: string[]; bytes: number; reused: boolean };
type Manifest = { hash: string; files: string[]; bytes: number; builtAt: string };

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .flatMap((entry) => (entry.isDirectory() ? filesUnder(join(dir, entry.name)) : [join(dir, entry.name)]))
    .sort();
}

/** The hash of everything a build is made of. */
function consoleSourceHash(): string {
  const hash = createHash('sha256');
  for (const file of [...filesUnder(SOURCE), fileURLToPath(import.meta.url)])
    hash
      .update(`${relative(ROOT, file)}\0`)
      .update(readFileSync(file))
      .update('\0');
  for (const name of PACKAGES)
    hash.update(
      `${name}@${(JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version}\0`,
    );
  return hash.digest('hex').slice(0, 16);
}

function readManifest(dir: string): Manifest | undefined {
  try {
    const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as Manifest;
    return manifest.files.every((f) => existsSync(join(dir, f))) ? manifest : undefined;
  } catch {
    return undefined;
  }
}

/** Bundles the console into `dir` (a fresh folder): assets/main-<hash>.js and .css, index.html, manifest.json. */
async function bundleInto(dir: string, hash: string): Promise<Manifest> {
  const result = await build({
    entryPoints: [join(SOURCE, 'src', 'main.tsx')],
    bundle: true,
    minify: true,
    format: 'esm',
    target: ['es2022', 'chrome110', 'firefox110', 'safari16'],
    jsx: 'automatic',
    jsxImportSource: 'preact',
    outdir: join(dir, 'assets'),
    entryNames: '[name]-[hash]',
    assetNames: '[name]-[hash]',
    metafile: true,
    logLevel: 'silent',
    absWorkingDir: ROOT,
  });
  const outputs = Object.keys(result.metafile.outputs).map((file) => relative(dir, resolve(ROOT, file)));
  const js = outputs.find((f) => f.endsWith('.js'));
  const css = outputs.find((f) => f.endsWith('.css'));
  if (!js || !css) throw new Error(`the console build wrote ${outputs.join(', ')}: no script or no stylesheet`);
  // The page names its assets relative to where it is served (%ASSETS%, filled in by the API).
  const html = readFileSync(join(SOURCE, 'index.html'), 'utf8')
    .replace('%JS%', js.slice('assets/'.length))
    .replace('%CSS%', css.slice('assets/'.length));
  writeFileSync(join(dir, 'index.html'), html);
  const files = ['index.html', ...outputs];
  const bytes = files.reduce((sum, f) => sum + readFileSync(join(dir, f)).length, 0);
  const manifest: Manifest = { hash, files, bytes, builtAt: new Date().toISOString() };
  writeFileSync(join(dir, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  return manifest;
}

/**
 * The console built into `dir`, unless `dir` already holds this build. Written beside it and
 * renamed into place, so a reader (the API, another process building the same) never sees half a
 * folder; when another process put the same build there first, theirs is kept.
 */
export async function buildConsole(dir: string = defaultConsoleDir): Promise<ConsoleBuild> {
  const hash = consoleSourceHash();
  const existing = readManifest(dir);
  if (existing?.hash === hash) return { dir, hash, files: existing.files, bytes: existing.bytes, reused: true };
  mkdirSync(dirname(dir), { recursive: true });
  const temp = `${dir}.tmp-${process.pid}-${Date.now()}`;
  try {
    const manifest = await bundleInto(temp, hash);
    const again = readManifest(dir);
    if (again?.hash === hash) return { dir, hash, files: again.files, bytes: again.bytes, reused: true };
    rmSync(dir, { recursive: true, force: true });
    renameSync(temp, dir);
    return { dir, hash, files: manifest.files, bytes: manifest.bytes, reused: false };
  } finally {
    rmSync(temp, { recursive: true, force: true });
  }
}

/** A folder of its own for each build under `root` (the tests': shared by every shard and run). */
export async function cachedConsoleBuild(root: string): Promise<ConsoleBuild> {
  return buildConsole(join(root, consoleSourceHash()));
}
