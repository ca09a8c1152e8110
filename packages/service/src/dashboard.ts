import type { ForgeSite } from '@bb/forge';
import type { SignedRecord, SpendSummary } from '@bb/provenance';
import { recordStatus } from '@bb/provenance';
import type { ForgeState } from '@bb/state';
import { forHtml } from '@bb/wall';

/** Every value on the page is data (I8): markup escaped, control and bidi marks shown. */
const esc = forHtml;

function ago(iso: string, now: number): string {
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (!Number.isFinite(s)) return '—';
  if (s < 90) return `${s} s ago`;
  if (s < 90 * 60) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

/** What the dashboard shows of capacity: the orchestrator's `Capacity`. */
export interface CapacityView {
  readonly used: number;
  readonly memoryBudget: number;
  readonly maxStarting: number;
  /** Memory held by warm bottles (part of `used`). */
  readonly warmBytes?: number;
  waiting(): Array<{ issue: string; since: string; bytes: number }>;
  /** Bottles kept warm between turns and the memory each holds. */
  warm?(): Array<{ slug: string; bytes: number }>;
  /** Bottles of the warm pool (`BB_POOL`), not yet given an issue, and the memory each holds. */
  pooled?(): Array<{ slug: string; bytes: number }>;
}

/** Something a person should know about an issue: why it could not launch. */
export interface NoticeView {
  /** `owner/repo#n` */
  key: string;
  at: string;
  message: string;
}

const gib = (n: number) => `${(n / 1024 ** 3).toFixed(1)} GiB`;

/** A supervise request waiting for the operator (read-only here: decide with `bb supervise`). */
export interface ProposalView {
  id: string;
  slug: string;
  kind: string;
  createdAt: string;
  justification: string;
  findings: Array<{ severity: string; message: string }>;
  rejections: number;
}

export interface DashboardInput {
  bottles: ForgeState[];
  /** Pending supervise requests. */
  proposals?: ProposalView[];
  capacity?: CapacityView | undefined;
  notices?: NoticeView[];
  /** The most recent runs, newest first. */
  runs?: SignedRecord[] | undefined;
  /** What the agents spent lately (the last 7 days). */
  spend?: SpendSummary | undefined;
  /** Where people read issues and PRs on the forge. */
  site: Pick<ForgeSite, 'webUrl'>;
  version: string;
  /** Seconds between reloads. @default 5 */
  refreshSeconds?: number;
  now?: number;
}

/**
 * The dashboard: one server-rendered page (no scripts to build) with the
 * bottles and the most recent runs, reloading itself every few seconds.
 */
export function renderDashboard(input: DashboardInput): string {
  const now = input.now ?? Date.now();
  const issueUrl = (b: { owner: string; repo: string }, n: number, kind: 'issues' | 'pulls') =>
    input.site.webUrl(
      kind === 'issues'
        ? { owner: b.owner, repo: b.repo, issue: n }
        : { owner: b.owner, repo: b.repo, pr: n },
    );
  const bottles = [...input.bottles].sort((a, b) => b.updatedAt.localeCompare(a.updatedAt));
  const runs = input.runs ?? [];
  const watchdog = new Map<string, string>();
  for (const r of [...runs].reverse())
    if (r.record.watchdogFired) watchdog.set(r.record.slug, r.record.watchdogFired.reason);
  const proposals = input.proposals ?? [];
  const awaiting = new Set(proposals.map((p) => p.slug));
  const shown = (b: ForgeState) =>
    b.status === 'running' && awaiting.has(b.slug) ? 'awaiting operator' : b.status;
  const bottleRows = bottles
    .map(
      (b) => `<tr data-slug="${esc(b.slug)}" class="status-${esc(b.status)}">
  <td><code>${esc(b.slug)}</code></td>
  <td><span class="badge ${esc(shown(b) === 'awaiting operator' ? 'awaiting' : b.status)}">${esc(shown(b))}</span></td>
  <td>${esc(b.agentName)}</td>
  <td><a href="${esc(issueUrl(b, b.issueNumber, 'issues'))}">${esc(`${b.owner}/${b.repo}#${b.issueNumber}`)}</a></td>
  <td>${b.prNumber ? `<a href="${esc(issueUrl(b, b.prNumber, 'pulls'))}">#${b.prNumber}</a>` : '—'}</td>
  <td title="${esc(b.lastCheckinAt)}">${esc(ago(b.lastCheckinAt, now))}</td>
  <td>${watchdog.has(b.slug) ? `<span class="badge watchdog">${esc(watchdog.get(b.slug))}</span>` : ''}</td>
</tr>`,
    )
    .join('\n');
  const live = bottles.filter((b) => b.status !== 'destroyed').length;
  const waiting = input.capacity?.waiting() ?? [];
  const warm = input.capacity?.warm?.() ?? [];
  // The pool's own room while a bottle is being made is kept under a name no bottle has.
  const pooled = (input.capacity?.pooled?.() ?? []).filter((p) => !p.slug.startsWith('\0'));
  const budget = input.capacity?.memoryBudget;
  const capacityLine = input.capacity
    ? `<p id="capacity" class="sub">running bottles take ${esc(gib(input.capacity.used))}${budget !== undefined && Number.isFinite(budget) ? ` of a ${esc(gib(budget))} budget` : ''}${
        warm.length > 0
          ? ` (${warm.length} warm between turns hold ${esc(gib(input.capacity.warmBytes ?? 0))})`
          : ''
      }${
        pooled.length > 0
          ? `, ${pooled.length} pooled ready for their issues hold ${Math.round(pooled.reduce((n, p) => n + p.bytes, 0) / 1024 ** 2)} MB`
          : ''
      }; ${
        waiting.length === 0
          ? 'nothing waits for capacity'
          : `<strong>${waiting.length} waiting for capacity</strong>: ${waiting
              .map((w) => `<code>${esc(w.issue)}</code> since ${esc(ago(w.since, now))}`)
              .join(', ')}`
      }</p>`
    : '';
  const issueOfKey = (key: string) => {
    const m = /^([^/]+)\/([^#]+)#(\d+)$/.exec(key);
    return m ? issueUrl({ owner: m[1]!, repo: m[2]! }, Number(m[3]), 'issues') : '#';
  };
  const notices = [...(input.notices ?? [])].reverse().slice(0, 20);
  const noticeBlock = notices.length
    ? `<h2>Needs attention</h2>
<ul id="notices">
${notices.map((n) => `<li><a href="${esc(issueOfKey(n.key))}">${esc(n.key)}</a>: ${esc(n.message)} <span class="sub">(${esc(ago(n.at, now))})</span></li>`).join('\n')}
</ul>`
    : '';
  const proposalBlock = proposals.length
    ? `<h2>Awaiting operator</h2>
<p class="sub">Agents asked for these changes; decide with <code>bb supervise</code> on the orchestrator's host.</p>
<table id="proposals">
<thead><tr><th>Request</th><th>Bottle</th><th>Change</th><th>Why</th><th>Findings</th><th>Asked</th></tr></thead>
<tbody>
${proposals
  .map(
    (p) => `<tr data-request="${esc(p.id)}">
  <td><code>${esc(p.id)}</code></td>
  <td><code>${esc(p.slug)}</code></td>
  <td>${esc(p.kind)}</td>
  <td>${esc(p.justification)}${p.rejections >= 3 ? ` <span class="badge watchdog">looping: ${esc(p.rejections)} rejections</span>` : ''}</td>
  <td>${p.findings.map((f) => `<span class="badge ${f.severity === 'high' ? 'failure' : 'blocked'}">${esc(f.severity)}</span> ${esc(f.message)}`).join('<br>') || '—'}</td>
  <td title="${esc(p.createdAt)}">${esc(ago(p.createdAt, now))}</td>
</tr>`,
  )
  .join('\n')}
</tbody>
</table>`
    : '';
  const runRows = runs
    .map(
      (r) => `<tr data-run="${esc(r.record.id)}">
  <td><a href="/api/runs/${encodeURIComponent(r.record.id)}"><code>${esc(r.record.id)}</code></a></td>
  <td><code>${esc(r.record.slug)}</code> turn ${esc(r.record.turn)}</td>
  <td>${esc(r.record.agent)}</td>
  <td><span class="badge ${esc(recordStatus(r))}">${esc(recordStatus(r))}</span></td>
  <td>${esc(r.record.done?.summary ?? r.record.watchdogFired?.detail ?? '')}</td>
  <td>${r.record.usage ? esc(`$${r.record.usage.costUsd.toFixed(4)}`) : '—'}</td>
  <td title="${esc(r.record.finishedAt)}">${esc(ago(r.record.finishedAt, now))}</td>
  <td><a href="/api/runs/${encodeURIComponent(r.record.id)}/verify">verify</a></td>
</tr>`,
    )
    .join('\n');
  const spend = input.spend;
  const spendTable = (id: string, title: string, rows: SpendSummary['byDay']) =>
    `<table id="${id}" class="spend">
<thead><tr><th>${esc(title)}</th><th>Turns</th><th>Tokens</th><th>Cost</th></tr></thead>
<tbody>
${rows.map((r) => `<tr><td>${esc(r.key)}</td><td>${esc(r.turns)}</td><td>${esc(r.tokens.toLocaleString('en-US'))}</td><td>${esc(`$${r.costUsd.toFixed(2)}`)}</td></tr>`).join('\n') || '<tr><td colspan="4" class="empty">Nothing spent.</td></tr>'}
</tbody>
</table>`;
  const spendBlock = spend
    ? `<h2>Spend</h2>
<p id="spend-total" class="sub">Since ${esc(spend.since.slice(0, 10))}: ${esc(spend.total.turns)} turns, ${esc(spend.total.tokens.toLocaleString('en-US'))} tokens, about ${esc(`$${spend.total.costUsd.toFixed(2)}`)} (estimated from the price table) · <a href="/api/usage">JSON</a></p>
<div class="spend-panel">
${spendTable('spend-days', 'Day (UTC)', spend.byDay)}
${spendTable('spend-agents', 'Agent', spend.byAgent)}
${spendTable('spend-issues', 'Top issues', spend.topIssues)}
</div>`
    : '';
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="${input.refreshSeconds ?? 5}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>bot-bottle</title>
<style>
  body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem; color: #1d1d1f; background: #fafafa; }
  h1 { font-size: 1.4rem; margin: 0 0 .2rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
  .sub { color: #666; margin: 0 0 1.5rem; }
  table { border-collapse: collapse; width: 100%; background: #fff; }
  th, td { text-align: left; padding: .45rem .7rem; border-bottom: 1px solid #e5e5e5; vertical-align: top; }
  th { font-weight: 600; color: #555; background: #f2f2f2; }
  .badge { display: inline-block; padding: 0 .5rem; border-radius: 999px; font-size: 12px; background: #e8e8e8; }
  .running { background: #d7f5dd; } .awaiting { background: #fff1c7; } .frozen { background: #dbe9ff; } .destroyed { background: #eee; color: #777; }
  .success { background: #d7f5dd; } .failure, .failed, .watchdog { background: #ffe0de; } .blocked { background: #fff1c7; }
  .empty { color: #777; padding: 1rem .7rem; }
  .spend-panel { display: flex; gap: 1rem; flex-wrap: wrap; } .spend-panel table { width: auto; flex: 1; }
</style>
</head>
<body>
<h1>bot-bottle</h1>
<p class="sub">orchestrator ${esc(input.version)} · ${live} live bottle${live === 1 ? '' : 's'} · refreshes every ${input.refreshSeconds ?? 5} s · <a href="/api/bottles">JSON</a></p>
${noticeBlock}
${proposalBlock}
<h2>Bottles</h2>
${capacityLine}
<table id="bottles">
<thead><tr><th>Bottle</th><th>Status</th><th>Agent</th><th>Issue</th><th>PR</th><th>Last check-in</th><th>Watchdog</th></tr></thead>
<tbody>
${bottleRows || '<tr><td colspan="7" class="empty">No bottles yet: assign an issue labelled <code>bot-bottle:&lt;agent&gt;</code> to the bot.</td></tr>'}
</tbody>
</table>
${spendBlock}
<h2>Recent runs</h2>
<table id="runs">
<thead><tr><th>Record</th><th>Bottle</th><th>Agent</th><th>Outcome</th><th>Summary</th><th>Cost</th><th>Finished</th><th>Signature</th></tr></thead>
<tbody>
${runRows || '<tr><td colspan="8" class="empty">No runs recorded yet.</td></tr>'}
</tbody>
</table>
</body>
</html>
`;
}
