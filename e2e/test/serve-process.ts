// One `bb orchestrate serve` process of a test's fleet: started with the environment
// the test gives it, its output in a log file of its own per start, ready once it
// answers /healthz; killed as a crash would (SIGKILL).
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, readFileSync } from 'node:fs';
import { MAIN } from './faults/harness';
import { until } from './support';

export interface ServeProcess {
  id: string;
  port: number;
  proc: ChildProcess | undefined;
  /** How many times it was started (its log files are numbered by it). */
  starts: number;
}

/** Start `r` with `env`, its output in `logFile(start number)`; resolves once it serves. */
export async function startServe(
  r: ServeProcess,
  env: Record<string, string | undefined>,
  logFile: (start: number) => string,
): Promise<void> {
  r.starts++;
  const log = createWriteStream(logFile(r.starts));
  const proc = spawn(process.execPath, [MAIN], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  r.proc = proc;
  proc.stdout!.pipe(log);
  proc.stderr!.pipe(log);
  await until(
    `${r.id} to listen`,
    async () => {
      if (proc.exitCode !== null)
        throw new Error(`${r.id} exited: ${readFileSync(log.path, 'utf8')}`);
      return fetch(`http://127.0.0.1:${r.port}/healthz`).then(
        (res) => res.ok,
        () => undefined,
      );
    },
    60_000,
  );
}

/** SIGKILL `r` (a stopped process too) and wait for its end. */
export async function killServe(r: ServeProcess): Promise<void> {
  const p = r.proc;
  r.proc = undefined;
  if (!p || p.exitCode !== null) return;
  const exited = new Promise<void>((res) => p.once('exit', () => res()));
  p.kill('SIGKILL');
  await exited;
}
