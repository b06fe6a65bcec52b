// The Temporal Worker Deployment version a worker runs as: a deployment name per kind of worker
// and a build id naming the code. Workflows follow the version that started them (PINNED) or
// the deployment's current version (AUTO_UPGRADE), so a rolling upgrade never hands an old
// history to new code unless asked to (docs/DEPLOYMENT.md, "Upgrading").
// Build id: TEMPORAL_BUILD_ID, else `<package version>+<commit>` with the commit from
// GIT_COMMIT or the checkout's own git, else the package version alone (a tarball install).
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { z } from 'zod';
import { gatherConfig, parseEnv } from './config.ts';

export type VersioningBehavior = 'PINNED' | 'AUTO_UPGRADE';

export type WorkerVersion = {
  deploymentName: string;
  buildId: string;
  /** What a workflow this version starts does when another version becomes current. */
  behavior: VersioningBehavior;
  /** `first`: make this version current only when the deployment has none; `always`: on every start. */
  promote: 'first' | 'always';
  /** How often a running worker checks whether to take over from a version left without pollers (0: never). */
  promoteCheckMs: number;
  /** A poller not seen for this long counts as gone (a live one polls again at least every minute). */
  promoteStaleMs: number;
};

const root = new URL('..', import.meta.url);

let checkoutCommit: string | null | undefined;
/** The short commit of this checkout, when it is one (once per process). */
function commitOfCheckout(): string | null {
  if (checkoutCommit !== undefined) return checkoutCommit;
  checkoutCommit = null;
  // Only this project's own checkout: an install nested in another repository must not take its commit.
  if (existsSync(new URL('.git', root)))
    try {
      checkoutCommit =
        execFileSync('git', ['rev-parse', '--short', 'HEAD'], {
          cwd: root,
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'ignore'],
        }).trim() || null;
    } catch {
      checkoutCommit = null;
    }
  return checkoutCommit;
}

/** `<package version>+<commit>`, or the package version alone when no commit is known. */
export function defaultBuildId(env: NodeJS.ProcessEnv): string {
  const { version } = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as { version: string };
  const commit = env.GIT_COMMIT?.trim() || commitOfCheckout();
  return commit ? `${version}+${commit}` : version;
}

// Temporal writes a version as `<deployment>.<build id>`: the name may not hold a dot.
const name = z
  .string()
  .min(1)
  .max(255)
  .regex(/^[^.\s]+$/, 'must be a name without dots or spaces (e.g. agent-gateway)');

/**
 * The version settings of one kind of worker: its deployment name from `nameVariable`
 * (TEMPORAL_DEPLOYMENT_NAME for the gateway's, FACILITATOR_DEPLOYMENT_NAME for the
 * facilitator's), the rest shared by both.
 */
export function loadWorkerVersion(
  env: NodeJS.ProcessEnv,
  nameVariable: 'TEMPORAL_DEPLOYMENT_NAME' | 'FACILITATOR_DEPLOYMENT_NAME',
  defaultName: string,
): WorkerVersion {
  const { e, named } = gatherConfig({
    e: () =>
      parseEnv(
        z.object({
          TEMPORAL_BUILD_ID: z
            .string()
            .max(255)
            .regex(/^\S+$/, 'must be a build id without spaces (e.g. 1.4.0+3f2c1ab)')
            .optional(),
          TEMPORAL_VERSIONING_BEHAVIOR: z.enum(['pinned', 'auto-upgrade']).default('pinned'),
          TEMPORAL_PROMOTE_VERSION: z.enum(['first', 'always']).default('first'),
          TEMPORAL_PROMOTE_CHECK_MS: z.coerce.number().int().nonnegative().default(30_000),
          TEMPORAL_PROMOTE_STALE_MS: z.coerce.number().int().positive().default(120_000),
        }),
        env,
      ),
    named: () => parseEnv(z.object({ [nameVariable]: name.default(defaultName) }), env),
  });
  return {
    deploymentName: named[nameVariable],
    buildId: e.TEMPORAL_BUILD_ID ?? defaultBuildId(env),
    behavior: e.TEMPORAL_VERSIONING_BEHAVIOR === 'pinned' ? 'PINNED' : 'AUTO_UPGRADE',
    promote: e.TEMPORAL_PROMOTE_VERSION,
    promoteCheckMs: e.TEMPORAL_PROMOTE_CHECK_MS,
    promoteStaleMs: e.TEMPORAL_PROMOTE_STALE_MS,
  };
}
