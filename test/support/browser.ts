// A real browser for the console's tests: Playwright (playwright-core, no browser download)
// driving the system's Chromium, Debian's `chromium` package, which .ci/run installs. A missing
// browser fails the test that needs it, saying how to install one: it is never skipped.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome'];

/** CHROMIUM_PATH, else the system's Chromium; an error naming the fix when there is none. */
function chromiumPath(): string {
  const named = process.env.CHROMIUM_PATH;
  if (named) {
    if (!existsSync(named)) throw new Error(`CHROMIUM_PATH names ${named}, which does not exist`);
    return named;
  }
  const found = CANDIDATES.find((path) => existsSync(path)) ?? onPath('chromium');
  if (!found)
    throw new Error(
      "no Chromium for the console tests: install Debian's chromium (apt-get install --no-install-recommends chromium; .ci/run does) or set CHROMIUM_PATH",
    );
  return found;
}

function onPath(name: string): string | undefined {
  try {
    return execFileSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** Headless Chromium; without its sandbox when run as root (CI containers), which Chromium otherwise refuses. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: chromiumPath(),
    headless: true,
    args: process.getuid?.() === 0 ? ['--no-sandbox'] : [],
  });
}
