// The cgroup a bounded build's steps run in (build-engine.ts): made with its caps,
// every process of it killed at once, removed after. cgroup v1 (a hierarchy per
// controller) or v2 (one unified tree).
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';

/** Where the cgroup filesystem is (v1 hierarchies below it, or the v2 unified tree). */
export const CGROUPS = '/sys/fs/cgroup';
/** cgroup v2 (one unified tree) rather than v1 (a hierarchy per controller). */
export const unified = () => existsSync(join(CGROUPS, 'cgroup.controllers'));

/** The directories of the build's cgroup: one per v1 controller, or one in the v2 tree. */
function cgroupDirs(name: string): Array<{ dir: string; pids: boolean }> {
  if (unified()) return [{ dir: join(CGROUPS, name), pids: true }];
  return [
    { dir: join(CGROUPS, 'pids', name), pids: true },
    { dir: join(CGROUPS, 'memory', name), pids: false },
  ];
}

/** Make the build's cgroup with its caps; false when it cannot be made. */
export function makeCgroup(name: string, pids: number, memory: number): boolean {
  try {
    if (unified()) {
      // Children of the root get the controllers only when the root hands them down.
      writeFileSync(join(CGROUPS, 'cgroup.subtree_control'), '+pids +memory');
      const dir = join(CGROUPS, name);
      mkdirSync(dir);
      writeFileSync(join(dir, 'pids.max'), String(pids));
      writeFileSync(join(dir, 'memory.max'), String(memory));
      writeFileSync(join(dir, 'cgroup.subtree_control'), '+pids +memory');
      return true;
    }
    const [p, m] = cgroupDirs(name);
    mkdirSync(p!.dir);
    writeFileSync(join(p!.dir, 'pids.max'), String(pids));
    if (m && existsSync(join(m.dir, '..'))) {
      mkdirSync(m.dir);
      writeFileSync(join(m.dir, 'memory.limit_in_bytes'), String(memory));
    }
    return true;
  } catch {
    removeCgroup(name);
    return false;
  }
}

/** Every process of the build's cgroup (and of the containers below it), killed. */
export function killCgroup(name: string): void {
  const base = cgroupDirs(name)[0]!.dir;
  // cgroup v2 kills a whole tree at once where the kernel has cgroup.kill.
  if (unified() && existsSync(join(base, 'cgroup.kill')))
    try {
      writeFileSync(join(base, 'cgroup.kill'), '1');
    } catch {}
  const walk = (dir: string): number[] => {
    if (!existsSync(dir)) return [];
    let pids: number[] = [];
    try {
      pids = readFileSync(join(dir, 'cgroup.procs'), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map(Number);
    } catch {}
    for (const e of safeReaddir(dir)) if (e.isDirectory()) pids.push(...walk(join(dir, e.name)));
    return pids;
  };
  for (const pid of walk(base))
    try {
      process.kill(pid, 'SIGKILL');
    } catch {}
}

export function removeCgroup(name: string): void {
  for (const { dir } of cgroupDirs(name)) {
    const rm = (d: string) => {
      for (const e of safeReaddir(d)) if (e.isDirectory()) rm(join(d, e.name));
      try {
        rmdirSync(d);
      } catch {}
    };
    if (existsSync(dir)) rm(dir);
  }
}

export function safeReaddir(dir: string) {
  try {
    return readdirSync(dir, { withFileTypes: true });
  } catch {
    return [];
  }
}
