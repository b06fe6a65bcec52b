// The application processes of a chaos system, spawned as real child processes with the
// system's environment exactly as `npm start` does, so a scenario can SIGKILL one and start it
// again. An exit the harness did not cause is counted: a crash is a finding.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { waitFor } from '../lib/ports.ts';
import { stopChild } from '../dev/temporal-dev-server.ts';

export type AppName = 'api' | 'worker' | 'facilitator' | 'facilitator-worker';

const SCRIPTS: Record<AppName, string> = {
  api: 'api/main.ts',
  worker: 'temporal/gateway-worker-main.ts',
  facilitator: 'facilitator-service/main.ts',
  'facilitator-worker': 'temporal/facilitator-worker-main.ts',
};

/** How long each process may take to answer its readiness URL after a start. */
const READY: Partial<Record<AppName, { label: string; timeoutMs: number }>> = {
  api: { label: 'gateway API', timeoutMs: 60_000 },
  facilitator: { label: 'facilitator', timeoutMs: 60_000 },
  worker: { label: 'gateway worker', timeoutMs: 90_000 },
};

export type AppProcess = {
  name: AppName;
  child: ChildProcess;
  /** Exits this harness did not cause (a crash is a finding). */
  unexpectedExits: number;
  kills: number;
};

export type AppProcesses = {
  apps: Map<AppName, AppProcess>;
  /** Starts a process (again) and waits until it answers its readiness URL (or, without one, is still alive). */
  start(name: AppName): Promise<void>;
  /** SIGKILLs a process and waits for it to be gone. */
  kill(name: AppName): Promise<void>;
  /** Stops every process; their exits from here on are expected. */
  stopAll(): Promise<void>;
};

type Killable = ChildProcess & { chaosKilled?: boolean };

export function appProcesses(opts: {
  env: Record<string, string>;
  log: (source: string, line: string) => void;
  logDir: string;
  /** The URL that answers 200 once the process is up (API and facilitator: /healthz; worker: its metrics). */
  readyUrls: Partial<Record<AppName, string>>;
}): AppProcesses {
  const apps = new Map<AppName, AppProcess>();
  let stopping = false;

  const spawnApp = (name: AppName): AppProcess => {
    const child = spawn(process.execPath, [SCRIPTS[name]], {
      env: { ...process.env, ...opts.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout?.on('data', (c: Buffer) => opts.log(name, c.toString()));
    child.stderr?.on('data', (c: Buffer) => opts.log(name, c.toString()));
    const previous = apps.get(name);
    const app: AppProcess = {
      name,
      child,
      unexpectedExits: previous?.unexpectedExits ?? 0,
      kills: previous?.kills ?? 0,
    };
    child.once('exit', (code, signal) => {
      if (stopping || (child as Killable).chaosKilled) return;
      app.unexpectedExits++;
      opts.log('harness', `${name} exited unexpectedly (${signal ?? code})`);
    });
    apps.set(name, app);
    return app;
  };

  const ready = async (app: AppProcess) => {
    const alive = async () => {
      if (app.child.exitCode !== null || app.child.signalCode !== null)
        throw new Error(`${app.name} exited during start (see ${join(opts.logDir, `${app.name}.log`)})`);
    };
    const url = opts.readyUrls[app.name];
    const wait = READY[app.name];
    if (!url || !wait) return alive();
    await waitFor(wait.label, async () => (await alive(), (await fetch(url)).ok), wait.timeoutMs);
  };

  return {
    apps,
    start: (name) => ready(spawnApp(name)),
    async kill(name) {
      const app = apps.get(name);
      if (!app || app.child.exitCode !== null || app.child.signalCode !== null) return;
      (app.child as Killable).chaosKilled = true;
      app.kills++;
      const exited = new Promise<void>((r) => app.child.once('exit', () => r()));
      app.child.kill('SIGKILL');
      await exited;
    },
    async stopAll() {
      stopping = true;
      await Promise.all([...apps.values()].map((a) => stopChild(a.child, 5_000)));
    },
  };
}
