// Prebuilt workflow bundles. `npm run build` bundles each worker's workflow code once (webpack,
// through the SDK's bundleWorkflowCode), the tracing workflow interceptors included, and writes
// beside each bundle a manifest of what went into it: the hash of every project source file and
// the version of every package bundled. A worker asked for a prebuilt bundle (NODE_ENV=production
// or WORKFLOW_BUNDLE_DIR) loads it instead of bundling at start, and refuses one whose sources
// have changed since: yesterday's workflow code beside today's activities would otherwise run
// unnoticed. Without either setting the worker bundles at start, as `npm start` does.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { bundleWorkflowCode, type WorkflowBundle } from '@temporalio/worker';
import { tracingWorkflowModules } from '../lib/observability/tracing.ts';
import { ConfigError } from '../lib/config.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** Each worker's workflow module: what its bundle is built from. */
export const workflowSources = {
  gateway: fileURLToPath(new URL('../workflows/index.ts', import.meta.url)),
  facilitator: fileURLToPath(new URL('../workflows/facilitator.ts', import.meta.url)),
} as const;
export type BundleName = keyof typeof workflowSources;

/** Where `npm run build` writes and a production worker looks, unless WORKFLOW_BUNDLE_DIR says otherwise. */
export const defaultBundleDir = join(ROOT, 'dist', 'workflows');

type Manifest = {
  /** sha256 of the bundle file itself. */
  code: string;
  /** Project source files (relative to the repository) → sha256 of their content. */
  files: Record<string, string>;
  /** Bundled packages (their folder from `node_modules/` on) → version. */
  packages: Record<string, string>;
  builtAt: string;
};

const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');
const quiet = { log() {}, trace() {}, debug() {}, info() {}, warn() {}, error() {} };

/** The modules webpack put into a bundle, read from its inline source map. */
function bundledSources(code: string): string[] {
  const map = /sourceMappingURL=data:application\/json;(?:charset=utf-8;)?base64,(\S+)\s*$/.exec(code);
  if (!map) throw new Error('the workflow bundle has no inline source map to read its sources from');
  return (JSON.parse(Buffer.from(map[1], 'base64').toString('utf8')) as { sources: string[] }).sources;
}

function packageVersion(dir: string): string {
  return (JSON.parse(readFileSync(join(ROOT, dir, 'package.json'), 'utf8')) as { version: string }).version;
}

function manifestOf(code: string): Manifest {
  const files: Record<string, string> = {};
  const packages: Record<string, string> = {};
  for (const source of bundledSources(code)) {
    const inModules = source.indexOf('/node_modules/');
    if (inModules >= 0) {
      // The package's folder, nested copies included: node_modules/a/node_modules/@b/c.
      const dir = /^node_modules\/(?:.*\/node_modules\/)?(?:@[^/]+\/)?[^/]+/.exec(source.slice(inModules + 1))?.[0];
      if (dir && !(dir in packages)) packages[dir] = packageVersion(dir);
    } else if (source.startsWith(ROOT) && existsSync(source)) {
      // (webpack's runtime and the generated entry point are not files: nothing to compare.)
      files[relative(ROOT, source)] = sha256(readFileSync(source));
    }
  }
  return { code: sha256(code), files, packages, builtAt: new Date().toISOString() };
}

/** Bundles both workers' workflow code into `dir` (`NAME.js` and its manifest `NAME.json`). */
export async function buildWorkflowBundles(dir: string): Promise<{ name: BundleName; file: string; bytes: number }[]> {
  mkdirSync(dir, { recursive: true });
  const built = [];
  for (const [name, workflowsPath] of Object.entries(workflowSources) as [BundleName, string][]) {
    const { code } = await bundleWorkflowCode({
      workflowsPath,
      workflowInterceptorModules: [...tracingWorkflowModules],
      logger: quiet,
    });
    const manifest = manifestOf(code);
    // Written aside then renamed: a worker starting meanwhile sees the old pair or the new one.
    const file = join(dir, `${name}.js`);
    writeFileSync(`${file}.tmp`, code);
    writeFileSync(join(dir, `${name}.json.tmp`), `${JSON.stringify(manifest, null, 2)}\n`);
    renameSync(`${file}.tmp`, file);
    renameSync(join(dir, `${name}.json.tmp`), join(dir, `${name}.json`));
    built.push({ name, file, bytes: Buffer.byteLength(code) });
  }
  return built;
}

/** Why the bundle in `dir` is not today's code, or null when it is. */
function staleness(manifest: Manifest, code: string): string | null {
  if (sha256(code) !== manifest.code) return 'the bundle file was changed after it was built';
  for (const [file, hash] of Object.entries(manifest.files)) {
    const path = join(ROOT, file);
    if (!existsSync(path)) return `${file} was removed since it was built`;
    if (sha256(readFileSync(path)) !== hash) return `${file} changed since it was built`;
  }
  for (const [dir, version] of Object.entries(manifest.packages)) {
    const now = existsSync(join(ROOT, dir, 'package.json')) ? packageVersion(dir) : 'missing';
    if (now !== version) return `${dir.replace(/^.*node_modules\//, '')} is ${now}, the bundle has ${version}`;
  }
  return null;
}

export type PrebuiltBundle = { workflowBundle: WorkflowBundle; file: string; builtAt: string };

/**
 * The prebuilt bundle of worker `name` when the environment asks for one (NODE_ENV=production,
 * or WORKFLOW_BUNDLE_DIR set), else undefined (the worker bundles at start). A bundle that is
 * asked for but missing, unreadable or built from other sources is a configuration error: one
 * line naming the setting, what is wrong and the command that fixes it.
 */
export function prebuiltWorkflowBundle(
  name: BundleName,
  env: NodeJS.ProcessEnv = process.env,
): PrebuiltBundle | undefined {
  const production = env.NODE_ENV === 'production';
  if (!production && !env.WORKFLOW_BUNDLE_DIR) return undefined;
  const variable = env.WORKFLOW_BUNDLE_DIR ? 'WORKFLOW_BUNDLE_DIR' : 'NODE_ENV';
  const dir = resolve(env.WORKFLOW_BUNDLE_DIR || defaultBundleDir);
  const file = join(dir, `${name}.js`);
  const shown = relative(process.cwd(), file) || file;
  const refuse = (why: string): never => {
    throw new ConfigError(`${variable}: the ${name} workflow bundle ${shown} ${why}; run npm run build`);
  };
  let code: string;
  let manifest: Manifest;
  try {
    code = readFileSync(file, 'utf8');
    manifest = JSON.parse(readFileSync(join(dir, `${name}.json`), 'utf8')) as Manifest;
    if (
      typeof manifest.code !== 'string' ||
      typeof manifest.files !== 'object' ||
      typeof manifest.packages !== 'object'
    )
      throw new Error('not a bundle manifest');
  } catch (err) {
    const missing = (err as NodeJS.ErrnoException).code === 'ENOENT';
    return refuse(missing ? 'is missing (or its manifest is)' : 'or its manifest cannot be read');
  }
  const stale = staleness(manifest, code);
  if (stale) return refuse(`is stale: ${stale}`);
  return { workflowBundle: { code }, file, builtAt: manifest.builtAt };
}
