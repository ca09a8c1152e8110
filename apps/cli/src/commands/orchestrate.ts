import { BbError } from '@bb/errors';
import { type ForgeSite, forgeKinds } from '@bb/forge';
import { FORGE_PROMPT_OVERLAY } from '@bb/forge-sidecar';
import {
  type Backend,
  hostBottleStorage,
  launch,
  resume,
  supervisedBottles,
  type TurnOutcome,
} from '@bb/headless';
import { installedCommit, recordTurn, saveBottleRow } from '@bb/lifecycle';
import { type SignedRecord, spendOf, spendSince, summarizeSpend } from '@bb/provenance';
import type { ForgeState, ForgeStateStore, Lease } from '@bb/state';
import { loadPolicy, SuperviseDesk, SuperviseStore } from '@bb/supervise';
import { forTerminalDeep, forTerminalLine, jsonText } from '@bb/wall';
import pkg from '../../package.json' with { type: 'json' };
import { type CliDeps, type CliState, makeBackend, openState } from '../deps';
import { backendName, type CliIo, need, needEnv, parse, progress, UsageError } from '../io';
import {
  ORCHESTRATE_RESUME_USAGE,
  ORCHESTRATE_SERVE_USAGE,
  ORCHESTRATE_START_USAGE,
  ORCHESTRATE_STATUS_USAGE,
  ORCHESTRATE_USAGE,
} from '../usage';

const nowIso = () => new Date().toISOString();

type RowBase = {
  owner: string;
  repo: string;
  issue: number;
  slug: string;
  agent: string;
  backend: Backend;
};

function saveRow(
  store: ForgeStateStore,
  io: CliIo,
  base: RowBase,
  status: ForgeState['status'],
  prNumber: number | null,
  botLogin: string,
): Promise<void> {
  const { backend, ...rest } = base;
  return saveBottleRow(
    store,
    { ...rest, backendName: backend.name, botLogin, prNumber, status },
    hostBottleStorage(io.env),
  );
}

function labels(v: unknown, usage: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const l of (v as string[] | undefined) ?? []) {
    const m = /^([A-Za-z0-9][A-Za-z0-9._/-]*)=(.*)$/.exec(l);
    if (!m || /^bb\.(slug|role|home)$/.test(m[1]!))
      throw new UsageError(
        `--container-label must be KEY=VALUE with a key other than bb.slug, bb.role, bb.home (got ${JSON.stringify(l)})`,
        usage,
      );
    out[m[1]!] = m[2]!;
  }
  return out;
}

function positiveInt(io: CliIo, name: string): number {
  const raw = needEnv(io, name, 'the issue this bottle works on');
  if (!/^[1-9]\d{0,9}$/.test(raw))
    throw new BbError(
      'INVALID_INPUT',
      `${name} must be a positive whole number (got ${JSON.stringify(raw)})`,
    );
  return Number(raw);
}

async function finish(
  io: CliIo,
  state: CliState,
  row: RowBase,
  prs: number[],
  out: TurnOutcome,
  startedAt: string,
  botLogin: string,
): Promise<number> {
  const rec = await recordTurn({
    slug: row.slug,
    agent: row.agent,
    env: io.env,
    forge: { owner: row.owner, repo: row.repo, issue: row.issue },
    prs,
    outcome: out,
    startedAt,
    provenance: {
      store: state.provenance,
      key: state.key(),
      scanner: state.scanner(),
      bbVersion: pkg.version,
      gitCommit: installedCommit(),
    },
    supervise: (slug, at) =>
      new SuperviseDesk({
        store: new SuperviseStore(state.database),
        bottles: supervisedBottles(io.env),
        policy: loadPolicy(state.home),
      }).auditTurn(slug, at),
  });
  await saveRow(state.store, io, row, 'frozen', rec.prs.at(-1) ?? null, botLogin);
  io.stdout(
    `${JSON.stringify({
      slug: row.slug,
      status: 'frozen',
      exitCode: out.exitCode,
      done: rec.done,
      prs: rec.prs,
      record: rec.record.id,
    })}\n`,
  );
  return out.exitCode;
}

async function start(argv: string[], io: CliIo, deps: CliDeps): Promise<number> {
  const { values } = parse(
    argv,
    {
      agent: { type: 'string' },
      prompt: { type: 'string' },
      bottle: { type: 'string', multiple: true },
      label: { type: 'string', multiple: true },
      'container-label': { type: 'string', multiple: true },
      backend: { type: 'string' },
    },
    ORCHESTRATE_START_USAGE,
  );
  const agent = need(values, 'agent', ORCHESTRATE_START_USAGE);
  const prompt = need(values, 'prompt', ORCHESTRATE_START_USAGE);
  const extraLabels = labels(values['container-label'], ORCHESTRATE_START_USAGE);
  const forgeLabels = (values['label'] as string[] | undefined) ?? [];
  for (const l of forgeLabels)
    if (!/^[^\s,][^,]{0,49}$/.test(l))
      throw new UsageError(
        `--label must be a forge label name such as bot-bottle:${agent} (got ${JSON.stringify(l)}); container labels are --container-label K=V`,
        ORCHESTRATE_START_USAGE,
      );
  const b = backendName(values['backend'], ORCHESTRATE_START_USAGE);
  const { kind, site } = forgeKinds.fromEnv(io.env);
  const token = needEnv(io, 'FORGE_TOKEN', "the bot's forge token (given to the sidecar only)");
  const owner = needEnv(io, 'FORGE_OWNER', "the repository's owner");
  const repo = needEnv(io, 'FORGE_REPO', "the repository's name");
  const issue = positiveInt(io, 'FORGE_ISSUE_NUMBER');
  const pr = io.env['FORGE_PR_NUMBER'] ? positiveInt(io, 'FORGE_PR_NUMBER') : undefined;
  const forge = site.forgeFor({ owner, repo, token });
  const botLogin = io.env['FORGE_BOT_LOGIN'] || (await site.whoami(token));
  const backend = makeBackend(io, b, deps);
  const state = await openState(io);
  try {
    if ((await state.store.get(owner, repo, issue))?.status === 'running')
      throw new BbError('CONFLICT', `${owner}/${repo}#${issue} already has a running bottle`);
    const slug = `${agent}-${Math.random().toString(36).slice(2, 7)}`;
    const row = { owner, repo, issue, slug, agent, backend };
    if (forgeLabels.length > 0 && !(await forge.addLabels(issue, forgeLabels)))
      throw new BbError(
        'INVALID_INPUT',
        `the ${kind.name} forge cannot label issues: label #${issue} there and leave out --label`,
      );
    const startedAt = nowIso();
    let out: TurnOutcome;
    await saveRow(state.store, io, row, 'running', pr ?? null, botLogin);
    try {
      out = await launch({
        agent,
        slug,
        // The same overlay the orchestrator gives: how to reach the forge and what it may write.
        prompt: `${FORGE_PROMPT_OVERLAY}\nYour issue is #${issue} of ${owner}/${repo}.\n\n${prompt}`,
        backend,
        env: io.env,
        labels: extraLabels,
        onProgress: progress(io),
        ...(values['bottle'] ? { bottles: values['bottle'] as string[] } : {}),
        forge: {
          kind: kind.name,
          site: site.env(),
          token,
          owner,
          repo,
          issue,
          pr,
          cloneUrl: site.cloneUrl({ owner, repo }),
        },
      });
    } catch (err) {
      await state.store.delete(owner, repo, issue);
      throw err;
    }
    return await finish(io, state, row, pr ? [pr] : [], out, startedAt, botLogin);
  } finally {
    await state.close();
  }
}

async function resumeCmd(argv: string[], io: CliIo, deps: CliDeps): Promise<number> {
  const { values } = parse(
    argv,
    { slug: { type: 'string' }, prompt: { type: 'string' }, backend: { type: 'string' } },
    ORCHESTRATE_RESUME_USAGE,
  );
  const slug = need(values, 'slug', ORCHESTRATE_RESUME_USAGE);
  const prompt = need(values, 'prompt', ORCHESTRATE_RESUME_USAGE);
  const backend = makeBackend(io, backendName(values['backend'], ORCHESTRATE_RESUME_USAGE), deps);
  const token = needEnv(io, 'FORGE_TOKEN', "the bot's forge token (it is never stored)");
  const state = await openState(io);
  try {
    const existing = (await state.store.all()).find((r) => r.slug === slug);
    if (!existing)
      throw new BbError(
        'NOT_FOUND',
        `no managed bottle ${slug}: see bb orchestrate status for the bottles there are`,
      );
    if (existing.status !== 'frozen')
      throw new BbError(
        'CONFLICT',
        `bottle ${slug} is ${existing.status}; only a frozen bottle resumes`,
      );
    const row = {
      owner: existing.owner,
      repo: existing.repo,
      issue: existing.issueNumber,
      slug,
      agent: existing.agentName,
      backend,
    };
    const startedAt = nowIso();
    await saveRow(state.store, io, row, 'running', existing.prNumber, existing.agentGitUser);
    let out: TurnOutcome;
    try {
      out = await resume({
        slug,
        prompt,
        backend,
        env: io.env,
        forgeToken: token,
        pr: existing.prNumber ?? undefined,
        onProgress: progress(io),
      });
    } catch (err) {
      await saveRow(state.store, io, row, 'frozen', existing.prNumber, existing.agentGitUser);
      throw err;
    }
    return await finish(
      io,
      state,
      row,
      existing.prNumber ? [existing.prNumber] : [],
      out,
      startedAt,
      existing.agentGitUser,
    );
  } finally {
    await state.close();
  }
}

/** The JSON shape of `bb orchestrate status --json` (stable; documented in docs/cli.md). */
export interface StatusJson {
  bottles: Array<{
    slug: string;
    agent: string;
    status: 'running' | 'frozen' | 'destroyed';
    repo: string;
    issue: number;
    issueUrl: string | null;
    pr: number | null;
    prUrl: string | null;
    lastCheckinAt: string;
    sessionId: string | null;
    /** A request of the agent waits for the operator (`bb supervise`); its watchdog is paused. */
    awaitingOperator: boolean;
    /** What its recorded turns used (as its credential proxy metered), priced from the price table. */
    usage: { turns: number; tokens: number; costUsd: number };
  }>;
  /** What every run recorded today (UTC) used. */
  today: { turns: number; tokens: number; costUsd: number };
  /** Supervise requests waiting for the operator, oldest first. */
  supervise: Array<{
    id: string;
    slug: string;
    kind: string;
    justification: string;
    createdAt: string;
  }>;
  /** Accepted events not handled yet, oldest first. */
  waiting: Array<{
    key: string;
    /** `owner/repo#n`, or null while parked. */
    issue: string | null;
    kind: string;
    /** `pending` (being handled), `deferred` (behind a turn or waiting for capacity), `parked`. */
    state: 'pending' | 'deferred' | 'parked';
    since: string;
  }>;
  /** The orchestrators working now (sharing this state) and how many issues each holds. */
  replicas: Array<{ holder: string; issues: number }>;
  /** Why targeted issues could not launch (what the bot said on them), newest first. */
  notices: Array<{ issue: string; message: string; at: string }>;
}

/** What a bottle's records say it used. */
function spentBy(chain: SignedRecord[]): { turns: number; tokens: number; costUsd: number } {
  return summarizeSpend(chain.map(spendOf), '').total;
}

/** Live issue leases by orchestrator: who is working on how many issues. */
function replicasOf(leases: Lease[]): Array<{ holder: string; issues: number }> {
  const by = new Map<string, number>();
  for (const l of leases)
    if (l.name.startsWith('issue:')) by.set(l.holder, (by.get(l.holder) ?? 0) + 1);
  return [...by]
    .map(([holder, issues]) => ({ holder, issues }))
    .sort((a, b) => a.holder.localeCompare(b.holder));
}

async function status(argv: string[], io: CliIo): Promise<number> {
  const { values } = parse(argv, { json: { type: 'boolean' } }, ORCHESTRATE_STATUS_USAGE);
  // Links when the forge is configured here (its variables set); none otherwise.
  let site: ForgeSite | undefined;
  try {
    site = forgeKinds.fromEnv(io.env).site;
  } catch {
    site = undefined;
  }
  const state = await openState(io);
  try {
    const rows = (await state.store.all()).sort((a, b) => b.updatedAt.localeCompare(a.updatedAt));
    const pending = await new SuperviseDesk({
      store: new SuperviseStore(state.database),
      bottles: supervisedBottles(io.env),
      policy: loadPolicy(state.home),
    }).list({ status: 'pending' });
    const awaiting = new Set(pending.map((p) => p.slug));
    const today = `${new Date().toISOString().slice(0, 10)}T00:00:00.000Z`;
    const json: StatusJson = {
      bottles: await Promise.all(
        rows.map(async (r) => ({
          slug: r.slug,
          agent: r.agentName,
          status: r.status,
          repo: `${r.owner}/${r.repo}`,
          issue: r.issueNumber,
          issueUrl: site
            ? site.webUrl({ owner: r.owner, repo: r.repo, issue: r.issueNumber })
            : null,
          pr: r.prNumber,
          prUrl:
            site && r.prNumber
              ? site.webUrl({ owner: r.owner, repo: r.repo, pr: r.prNumber })
              : null,
          lastCheckinAt: r.lastCheckinAt,
          sessionId: r.sessionId,
          awaitingOperator: r.status === 'running' && awaiting.has(r.slug),
          usage: spentBy(await state.provenance.chain(r.slug)),
        })),
      ),
      today: summarizeSpend(await spendSince(state.provenance, today), today).total,
      supervise: pending.map((p) => ({
        id: p.id,
        slug: p.slug,
        kind: p.kind,
        justification: p.justification,
        createdAt: p.createdAt,
      })),
      waiting: (await state.store.openEvents()).map((e) => ({
        key: e.key,
        issue: e.issue,
        kind: String((e.payload as { kind?: unknown }).kind ?? 'unknown'),
        state: e.state as 'pending' | 'deferred' | 'parked',
        since: e.receivedAt,
      })),
      notices: (await state.store.recentEvents('bb:feedback:', 20)).map((e) => {
        const p = e.payload as { issue?: string; message?: string };
        return { issue: p.issue ?? '', message: p.message ?? '', at: e.receivedAt };
      }),
      replicas: replicasOf(await state.leases.leases()),
    };
    if (values['json']) {
      // Lossless, and nothing in it a terminal acts on: justifications, notices and
      // slugs carry words the agent (or a forge user) chose.
      io.stdout(`${jsonText(json, 2)}\n`);
      return 0;
    }
    // Every field below may hold the agent's or a stranger's words: shown as data.
    const shown = forTerminalDeep(json);
    const waiting = () => {
      if (shown.supervise.length > 0) {
        io.stdout(
          `\n${shown.supervise.length} request${shown.supervise.length === 1 ? '' : 's'} awaiting the operator (bb supervise):\n`,
        );
        for (const p of shown.supervise)
          io.stdout(
            `  ${p.id}  ${p.slug}  ${p.kind}  ${forTerminalLine(p.justification).slice(0, 70)}\n`,
          );
      }
      if (shown.notices.length > 0) {
        io.stdout('\nneeds attention:\n');
        for (const n of shown.notices)
          io.stdout(`  ${n.issue}  ${forTerminalLine(n.message)}  (${n.at})\n`);
      }
      if (shown.waiting.length === 0) return;
      io.stdout(
        `\n${shown.waiting.length} event${shown.waiting.length === 1 ? '' : 's'} waiting:\n`,
      );
      for (const w of shown.waiting)
        io.stdout(`  ${w.issue ?? '(no bottle yet)'}  ${w.kind}  ${w.state} since ${w.since}\n`);
    };
    if (shown.replicas.length > 1)
      io.stdout(
        `orchestrators: ${shown.replicas.map((r) => `${r.holder} (${r.issues} issue${r.issues === 1 ? '' : 's'})`).join(', ')}\n`,
      );
    if (shown.bottles.length === 0) {
      io.stdout('no managed bottles\n');
      waiting();
      return 0;
    }
    const table = [
      ['BOTTLE', 'STATUS', 'AGENT', 'ISSUE', 'PR', 'LAST CHECK-IN', 'COST'],
      ...shown.bottles.map((b) => [
        b.slug,
        b.awaitingOperator ? 'awaiting operator' : b.status,
        b.agent,
        b.issueUrl ?? `${b.repo}#${b.issue}`,
        b.prUrl ?? (b.pr ? `#${b.pr}` : '-'),
        b.lastCheckinAt,
        `$${b.usage.costUsd.toFixed(2)}`,
      ]),
    ];
    const widths = table[0]!.map((_, i) => Math.max(...table.map((r) => r[i]!.length)));
    for (const r of table)
      io.stdout(
        `${r
          .map((c, i) => c.padEnd(widths[i]!))
          .join('  ')
          .trimEnd()}\n`,
      );
    io.stdout(
      `\ntoday (UTC): ${shown.today.turns} turns, ${shown.today.tokens.toLocaleString('en-US')} tokens, about $${shown.today.costUsd.toFixed(2)} (bb usage for more)\n`,
    );
    waiting();
    return 0;
  } finally {
    await state.close();
  }
}

async function serveCmd(argv: string[], io: CliIo, deps: CliDeps): Promise<number> {
  parse(argv, {}, ORCHESTRATE_SERVE_USAGE);
  // A backend tests inject; otherwise the service makes the one BB_BACKEND names.
  const backend = deps.backend
    ? makeBackend(io, backendName(io.env['BB_BACKEND'], ORCHESTRATE_SERVE_USAGE), deps)
    : undefined;
  const { serve } = await import('@bb/service');
  const running = await serve({ env: io.env, ...(backend ? { backend } : {}) });
  io.stderr(`bb: orchestrator listening on ${running.url} (dashboard at ${running.url}/)\n`);
  await (io.interrupted ?? new Promise<void>(() => {}));
  await running.close();
  return 0;
}

export async function orchestrateCommand(
  argv: string[],
  io: CliIo,
  deps: CliDeps,
): Promise<number> {
  const [sub, ...rest] = argv;
  switch (sub) {
    case 'start':
      return start(rest, io, deps);
    case 'resume':
      return resumeCmd(rest, io, deps);
    case 'status':
      return status(rest, io);
    case 'serve':
      return serveCmd(rest, io, deps);
    case undefined:
    case '-h':
    case '--help':
      if (sub) {
        io.stdout(ORCHESTRATE_USAGE);
        return 0;
      }
      throw new UsageError('name a subcommand: start, resume, status or serve', ORCHESTRATE_USAGE);
    default:
      throw new UsageError(`unknown subcommand ${JSON.stringify(sub)}`, ORCHESTRATE_USAGE);
  }
}
