import { forMarkdown, forTerminalLine } from '@bb/wall';
import type { SignedRecord } from './record';
import type { Verification } from './sign';
import { recordStatus } from './store';
import type { SpendRow, SpendSummary, Usage } from './usage';

const thousands = (n: number) => n.toLocaleString('en-US');
const dollars = (n: number) => `$${n.toFixed(2)}`;

/** A turn's usage on one line: the tokens of each kind, the estimate, and each model's share. */
export function usageLine(u: Usage): string {
  const estimated = u.models.reduce((n, m) => n + m.estimated, 0);
  return `${thousands(u.input)} in, ${thousands(u.output)} out, ${thousands(u.cacheRead)} cache read, ${thousands(u.cacheWrite)} cache write; about $${u.costUsd.toFixed(4)}${estimated ? ` (${estimated} answers did not say their usage: counted from their size)` : ''}; ${u.models.map((m) => `${m.model} ×${m.requests}${m.priced === '*' ? ' (no price of its own: priced as *)' : ''}`).join(', ')}`;
}

function lines(s: SignedRecord): Array<[string, string]> {
  const r = s.record;
  return [
    ['run', r.id],
    [
      'bottle',
      `${r.slug} (agent ${r.agent}${r.provider ? `, ${r.provider}${r.providerVersion ? ` ${r.providerVersion}` : ''}` : ''}; bottles ${r.bottles.join(', ')})`,
    ],
    [
      'forge',
      r.forge
        ? `${r.forge.owner}/${r.forge.repo} issue #${r.forge.issue}${r.forge.prs.length ? `, PR ${r.forge.prs.map((p) => `#${p}`).join(', ')}` : ''}`
        : 'none',
    ],
    ['turn', String(r.turn)],
    ['time', `${r.startedAt} → ${r.finishedAt} (${(r.durationMs / 1000).toFixed(1)} s)`],
    [
      'outcome',
      `${recordStatus(s)}; exit ${r.exitCode ?? 'none'}${r.done ? `; done: ${r.done.status}: ${r.done.summary}` : '; no done signal'}${r.agentError ? `; agent error: ${r.agentError}` : ''}`,
    ],
    [
      'watchdog',
      r.watchdogFired ? `FIRED (${r.watchdogFired.reason}): ${r.watchdogFired.detail}` : 'no',
    ],
    [
      'secrets',
      r.secretScan.error
        ? `scan failed: ${r.secretScan.error}`
        : r.secretScan.findings.length
          ? `${r.secretScan.findings.length} FOUND: ${r.secretScan.findings.map((f) => `${f.rule} in ${f.file}:${f.line} (${f.commit})`).join('; ')}`
          : `none (${r.secretScan.tool}, ${r.secretScan.scanned})`,
    ],
    [
      'op log',
      `${foldOps(r.opLog.entries).length} operations (${r.opLog.entries.length} lines); ${r.opLog.verified ? 'chain intact' : `TAMPERED: ${r.opLog.problems.map((p) => `line ${p.line}: ${p.problem}`).join('; ')}`}`,
    ],
    ['egress', r.egress ? JSON.stringify(r.egress) : 'no egress log'],
    [
      'usage',
      r.usage ? usageLine(r.usage) : 'not metered (no model answer went through the proxy)',
    ],
    [
      'supervise',
      r.supervise?.length
        ? r.supervise
            .map(
              (q) =>
                `${q.id} ${q.kind} via ${q.tool}: ${q.status}${q.decision ? ` by ${q.decision.by}${q.decision.via ? ` (${q.decision.via})` : ''} at ${q.decision.at}${q.decision.scope ? ` (scope ${q.decision.scope})` : ''}${q.decision.override ? ' OVER THE CEILING' : ''}${q.decision.finalHash ? ` file ${q.decision.finalHash.slice(0, 12)}` : ''}${q.decision.reason ? `: ${q.decision.reason}` : ''}` : ''}${q.remediation ? `; remediation ${q.remediation.ok ? 'ok' : 'FAILED'}: ${q.remediation.detail}` : ''}`,
            )
            .join('; ')
        : 'no requests',
    ],
    ['built by', `bot-bottle ${r.bbVersion}${r.gitCommit ? ` (${r.gitCommit.slice(0, 12)})` : ''}`],
    [
      'signature',
      `ed25519 key ${s.keyId}; hash ${s.hash.slice(0, 16)}…; previous ${r.prev.slice(0, 16)}…`,
    ],
  ];
}

/**
 * The op log as a person reads it: a write's `started` line (flushed before its
 * request) is folded into its outcome line; one with no outcome stays, saying so.
 */
export function foldOps(entries: Array<Record<string, unknown>>): Array<Record<string, unknown>> {
  const finished = new Set<unknown>(
    entries.map((e) => e['attempt']).filter((a) => a !== undefined),
  );
  return entries.flatMap((e) =>
    e['outcome'] !== 'started'
      ? [e]
      : finished.has(e['seq'])
        ? []
        : [{ ...e, outcome: 'no outcome', summary: `${String(e['summary'])} (never finished)` }],
  );
}

/** The record for a terminal. */
export function renderTerminal(s: SignedRecord): string {
  // Summaries, details and op-log lines carry the agent's words (I8): each value
  // is one printable line, whatever it holds.
  const rows = lines(s).map(([k, v]) => [k, forTerminalLine(v)] as const);
  const w = Math.max(...rows.map(([k]) => k.length));
  const ops = foldOps(s.record.opLog.entries).map(
    (e) =>
      `  ${String(e['seq']).padStart(3)}  ${forTerminalLine(String(e['outcome'])).padEnd(8)} ${forTerminalLine(String(e['summary']))}`,
  );
  return `${rows.map(([k, v]) => `${k.padEnd(w)}  ${v}`).join('\n')}\n\noperations:\n${ops.join('\n') || '  (none)'}\n`;
}

/** The record as Markdown. */
export function renderMarkdown(s: SignedRecord): string {
  // A table cell: one line of literal text, never markup (I8).
  const esc = (t: string) => forMarkdown(t.replace(/[\r\n]+/g, ' '));
  const rows = lines(s).map(([k, v]) => `| ${k} | ${esc(v)} |`);
  const ops = foldOps(s.record.opLog.entries).map(
    (e) =>
      `| ${esc(String(e['seq']))} | ${esc(String(e['method']))} | ${esc(String(e['outcome']))} | ${esc(String(e['summary']))} |`,
  );
  return `## Run ${esc(s.record.id)}\n\n| | |\n|---|---|\n${rows.join('\n')}\n\n### Operations\n\n| # | method | outcome | what |\n|---|---|---|---|\n${ops.join('\n')}\n`;
}

/** A verification result for a terminal. */
export function renderVerification(v: Verification, what: string): string {
  const w = forTerminalLine(what);
  const keys = v.keyIds?.length ? ` (signed by key ${v.keyIds.join(', ')})` : '';
  return v.ok
    ? `${w}: OK${keys}\n`
    : `${w}: FAILED\n${v.problems.map((p) => `  - ${forTerminalLine(p)}`).join('\n')}\n`;
}

/** A spend summary as terminal text: totals, then per day, per agent and the dearest issues. */
export function renderSpend(s: SpendSummary): string {
  const table = (title: string, rows: SpendRow[]) => {
    if (rows.length === 0) return `${title}: none\n`;
    const w = Math.max(title.length, ...rows.map((r) => r.key.length));
    return `${title.padEnd(w)}  ${'turns'.padStart(6)}  ${'tokens'.padStart(14)}  ${'cost'.padStart(10)}\n${rows
      .map(
        (r) =>
          `${r.key.padEnd(w)}  ${String(r.turns).padStart(6)}  ${thousands(r.tokens).padStart(14)}  ${dollars(r.costUsd).padStart(10)}`,
      )
      .join('\n')}\n`;
  };
  return `Since ${s.since}: ${s.total.turns} turns, ${thousands(s.total.tokens)} tokens, about ${dollars(s.total.costUsd)} (estimated from the price table).\n\n${table('day (UTC)', s.byDay)}\n${table('agent', s.byAgent)}\n${table('issue', s.topIssues)}`;
}
