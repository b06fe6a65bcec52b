// A content hash of the workflow code the workers run: the default build id's suffix when no
// commit is known (a Docker image without `.git` or GIT_COMMIT), so that two releases with
// different workflow code never share a version and replicas of one image always do.
// Its inputs are what goes into a workflow bundle (temporal/workflow-bundles.ts, whose manifest
// lists them): the project's files under workflows/, the search-attribute definitions they
// import and the settlement activities' shared timing (the layer rules allow them nothing else
// but types, which bundling erases), and the versions of the SDK packages that
// run that code. Reading those few files takes milliseconds at start, where bundling (which
// would give the exact list) takes seconds; and it names the same code whether the worker
// bundles at start or loads a prebuilt bundle, and wherever the image was built, where the
// bundle's own hash would vary with the build folder. test/operations/workflow-bundle.test.ts checks that
// every project file a fresh bundle holds is among these inputs.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));

/** The project's workflow code: folders walked whole, single files as they are. */
const SOURCES = ['workflows', 'temporal/search-attributes.ts', 'activities/settlement/types.ts'];
/** The SDK packages bundled with it; the packages they bring in come with their versions. */
const PACKAGES = ['@temporalio/workflow', '@temporalio/common', '@temporalio/interceptors-opentelemetry'];

const sha256 = (data: string | Buffer) => createHash('sha256').update(data).digest('hex');

/** The project files the hash covers, relative to `root`, sorted (the order must not depend on the file system). */
export function workflowCodeFiles(root = ROOT): string[] {
  const files: string[] = [];
  for (const source of SOURCES) {
    const path = join(root, source);
    if (!existsSync(path)) continue;
    if (source.endsWith('.ts')) files.push(source);
    else
      for (const entry of readdirSync(path, { recursive: true, withFileTypes: true }))
        if (entry.isFile()) files.push(relative(root, join(entry.parentPath, entry.name)));
  }
  return files.sort();
}

function packageVersion(root: string, name: string): string {
  try {
    return (JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')) as { version: string })
      .version;
  } catch {
    return 'missing';
  }
}

/** sha256 (hex) of the workflow files' paths and contents and the bundled SDK packages' versions. */
export function workflowCodeHash(root = ROOT): string {
  const lines = [
    ...workflowCodeFiles(root).map((file) => `${file} ${sha256(readFileSync(join(root, file)))}`),
    ...PACKAGES.map((name) => `${name}@${packageVersion(root, name)}`),
  ];
  return sha256(lines.join('\n'));
}
