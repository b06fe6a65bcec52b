// The Temporal Worker Deployment version a worker runs as: a deployment name per kind of worker
// and a build id naming the code. Workflows follow the version that started them (PINNED) or
// the deployment's current version (AUTO_UPGRADE), so a rolling upgrade never hands an old
// history to new code unless asked to (docs/DEPLOYMENT.md, "Upgrading").
// Build id: TEMPORAL_BUILD_ID, else `<package version>+<commit>`, else
// `<package version>+src-<hash>`. The commit (GIT_COMMIT, else the checkout's own git) is cut to
// 12 characters: a shallow clone, a full one and a CI's 40-character SHA of one commit must give
// every replica the same id. Without a commit (an image without `.git`), the hash of the workflow
// code (lib/workflow-code-hash.ts) stands in: the package version alone would be one id for
// every release, and a new release would join the current version with its PINNED histories.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { z } from 'zod';
import { gatherConfig, parseEnv } from './config.ts';
import { workflowCodeHash } from './workflow-code-hash.ts';

type VersioningBehavior = 'PINNED' | 'AUTO_UPGRADE';

export type WorkerVersion = {
  deploymentName: string;
  buildId: string;
  /** What a workflow this version starts does when another version becomes current. */
  behavior: VersioningBehavior;
  /** `first`: make this version current only when the deployment has none; `always`: on every start. */
  promote: 'first' | 'always';
  /** A setting the worker should warn about once at start (the settings are valid, but risky). */
  caution?: string;
  /** How often a running worker checks whether to take over from a version left without pollers (0: never). */
  promoteCheckMs: number;
  /** A poller not seen for this long counts as gone (a live one polls again at least every minute). */
  promoteStaleMs: number;
};

const root = new URL('..', import.meta.url);

/** The production defaults (npm start changes them on its own dev server: scripts/lib/start-versioning.ts). */
export const VERSIONING_DEFAULTS = {
  TEMPORAL_VERSIONING_BEHAVIOR: 'pinned',
  TEMPORAL_PROMOTE_VERSION: 'first',
} as const;

/** How much of a commit names it in a build id: git's abbreviation length varies with the clone. */
const COMMIT_LENGTH = 12;

let checkoutCommit: string | null | undefined;
/** This checkout's commit, abbreviated to COMMIT_LENGTH, when it is one (once per process). */
export function commitOfCheckout(): string | null {
  if (checkoutCommit !== undefined) return checkoutCommit;
  checkoutCommit = null;
  // Only this project's own checkout: an install nested in another repository must not take its commit.
  if (existsSync(new URL('.git', root)))
    try {
      checkoutCommit =
        execFileSync('git', ['rev-parse', `--short=${COMMIT_LENGTH}`, 'HEAD'], {
          cwd: root,
          encoding: 'utf8',
          stdio: ['ignore', 'pipe', 'ignore'],
        }).trim() || null;
    } catch {
      checkoutCommit = null;
    }
  return checkoutCommit;
}

let codeHash: string | undefined;

/** `<package version>+<commit>`, or `<package version>+src-<workflow code hash>` when no commit is known. */
export function defaultBuildId(env: NodeJS.ProcessEnv): string {
  const { version } = JSON.parse(readFileSync(new URL('package.json', root), 'utf8')) as { version: string };
  const commit = env.GIT_COMMIT?.trim().slice(0, COMMIT_LENGTH) || commitOfCheckout();
  if (commit) return `${version}+${commit}`;
  codeHash ??= workflowCodeHash().slice(0, COMMIT_LENGTH);
  return `${version}+src-${codeHash}`;
}

// Temporal reserves the dot in deployment names (the version's older one-string form was
// `<deployment>.<build id>`); the TemporalWorkerDeploymentVersion search attribute holds
// `<deployment>:<build id>`.
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
          TEMPORAL_VERSIONING_BEHAVIOR: z
            .enum(['pinned', 'auto-upgrade'])
            .default(VERSIONING_DEFAULTS.TEMPORAL_VERSIONING_BEHAVIOR),
          TEMPORAL_PROMOTE_VERSION: z.enum(['first', 'always']).default(VERSIONING_DEFAULTS.TEMPORAL_PROMOTE_VERSION),
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
    // In production old and new workers overlap: an old one that restarts would make its version
    // current again, rolling the deployment back without a word.
    ...(e.TEMPORAL_PROMOTE_VERSION === 'always' &&
      env.NODE_ENV === 'production' && {
        caution:
          'TEMPORAL_PROMOTE_VERSION=always in production: any worker that (re)starts makes its version current, an old one rolling the deployment back; use first and promote with set-current-version',
      }),
    promoteCheckMs: e.TEMPORAL_PROMOTE_CHECK_MS,
    promoteStaleMs: e.TEMPORAL_PROMOTE_STALE_MS,
  };
}
