// Child processes of the benchmarks (upstream, bare proxy, gateway API, workers): started with
// this Node, collected in a list so the run can stop every one it started, and nothing else.
import { spawn, type ChildProcess } from 'node:child_process';

export function spawnInto(
  children: ChildProcess[],
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
): ChildProcess {
  const c = spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(c);
  return c;
}

/** The port a child (bench/proxy-servers.ts) prints as `listening PORT` once ready. */
export function listeningPort(c: ChildProcess): Promise<number> {
  return new Promise((resolve, reject) => {
    let out = '';
    c.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /listening (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    c.once('exit', (code) => reject(new Error(`child exited ${code}`)));
  });
}

/** Stops the children gracefully first (a CPU profile is written on exit), SIGKILL after 5 s. */
export function stopChildren(children: ChildProcess[]): Promise<unknown> {
  return Promise.all(
    children.map((c) =>
      c.exitCode !== null || c.signalCode !== null
        ? undefined
        : new Promise<void>((resolve) => {
            const force = setTimeout(() => c.kill('SIGKILL'), 5_000);
            c.once('exit', () => {
              clearTimeout(force);
              resolve();
            });
            c.kill('SIGTERM');
          }),
    ),
  );
}
