// How `npm start`'s workers run as Worker Deployment versions (docs/DEPLOYMENT.md, "Worker
// Deployment versions"). On the dev server npm start runs itself, its workers are the only ones
// of their deployments: each start makes its version current and workflows follow the new code
// (every workflow change is patched and replay-tested) instead of waiting for the previous
// version's workers, which are gone. On a cluster named by TEMPORAL_ADDRESS other workers may
// serve the same deployments, so the production defaults stay: a laptop's version never becomes
// current by itself there. Explicit TEMPORAL_PROMOTE_VERSION / TEMPORAL_VERSIONING_BEHAVIOR win.
import { VERSIONING_DEFAULTS } from '../../lib/worker-version.ts';

export type StartVersioning = {
  /** What npm start adds to its children's environment. */
  env: { TEMPORAL_PROMOTE_VERSION?: string; TEMPORAL_VERSIONING_BEHAVIOR?: string };
  /** The startup line and banner text saying which rule applies. */
  line: string;
};

export function startVersioning(env: NodeJS.ProcessEnv): StartVersioning {
  const own = !env.TEMPORAL_ADDRESS;
  const promote = env.TEMPORAL_PROMOTE_VERSION ?? (own ? 'always' : VERSIONING_DEFAULTS.TEMPORAL_PROMOTE_VERSION);
  const behavior =
    env.TEMPORAL_VERSIONING_BEHAVIOR ?? (own ? 'auto-upgrade' : VERSIONING_DEFAULTS.TEMPORAL_VERSIONING_BEHAVIOR);
  const settings = `TEMPORAL_PROMOTE_VERSION=${promote}, TEMPORAL_VERSIONING_BEHAVIOR=${behavior}`;
  const effect =
    promote === 'always'
      ? 'each start makes this version current'
      : 'this version becomes current only on a deployment without one';
  return own
    ? {
        env: { TEMPORAL_PROMOTE_VERSION: promote, TEMPORAL_VERSIONING_BEHAVIOR: behavior },
        line: `${settings}: ${effect} (npm start's own dev server, its workers the only ones)`,
      }
    : {
        env: {},
        line: `${settings}: ${effect} (Temporal at TEMPORAL_ADDRESS may be shared: the production defaults unless set)`,
      };
}
