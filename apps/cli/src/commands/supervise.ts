import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { BbError } from '@bb/errors';
import { readMeta } from '@bb/headless';
import {
  type DecisionScope,
  KINDS,
  type RequestStatus,
  type RequestView,
  SCOPES,
} from '@bb/supervise';
import { forTerminalLine, jsonText, forTerminal as printable } from '@bb/wall';
import type { CliDeps } from '../deps';
import { bold, type CliIo, dim, green, parse, red, UsageError, yellow } from '../io';
import { SUPERVISE_USAGE } from '../usage';
import {
  age,
  type DeskTarget,
  editInEditor,
  openPort,
  operator,
  safeView,
  takeTarget,
} from './supervise-desk';
import { manifestChange } from './supervise-manifest';

/** One request as terminal text: what, why, the evidence, the findings and the diff. */
export function renderRequest(io: CliIo, unsafe: RequestView): string {
  const r = safeView(unsafe);
  const sev = (s: string) =>
    s === 'high' ? red(io, s) : s === 'medium' ? yellow(io, s) : dim(io, s);
  const lines = [
    `${bold(io, r.id)}  ${r.status}  ${r.slug}  ${r.kind} (${r.file}) via ${r.tool}${r.rerouted ? ' (routed by its file)' : ''}`,
    `  asked ${age(r.createdAt)} ago${r.turn ? ` in turn ${r.turn}` : ''}; expires ${r.expiresAt}`,
    `  why: ${r.justification}`,
    ...(r.evidence.length
      ? [
          '  refused before it:',
          ...r.evidence.map(
            (e) =>
              `    ${e.time} ${e.kind} ${e.method ?? ''} ${e.host || e.route || ''}${e.port ? `:${e.port}` : ''} — ${e.rule}`,
          ),
        ]
      : []),
    ...(r.findings.length
      ? ['  findings:', ...r.findings.map((f) => `    ${sev(f.severity)} ${f.message}`)]
      : ['  findings: none']),
    ...(r.beyondCeiling.length
      ? [
          '  beyond the ceiling (approve needs --override):',
          ...r.beyondCeiling.map((b) => `    ${red(io, b)}`),
        ]
      : []),
    ...(r.rejections >= 3
      ? [yellow(io, `  the agent is looping: ${r.rejections} rejections in a row`)]
      : []),
    ...(r.decidedBy
      ? [
          `  decided by ${r.decidedBy}${r.decidedVia ? ` (${r.decidedVia})` : ''} at ${r.decidedAt}${r.scope ? ` (scope ${r.scope})` : ''}${r.reason ? `: ${r.reason}` : ''}`,
        ]
      : []),
    ...(r.remediation
      ? [
          `  remediation: ${r.remediation.ok ? green(io, 'ok') : red(io, 'failed')} ${r.remediation.detail}`,
        ]
      : []),
    `  base ${r.baseHash.slice(0, 12)} -> proposed ${r.candidateHash.slice(0, 12)}`,
    '',
    colourDiff(io, r.diff),
  ];
  return `${lines.join('\n')}\n`;
}

export function colourDiff(io: CliIo, diff: string): string {
  return diff
    .split('\n')
    .filter((l) => !l.startsWith('====='))
    .map((l) =>
      l.startsWith('+') && !l.startsWith('+++')
        ? green(io, l)
        : l.startsWith('-') && !l.startsWith('---')
          ? red(io, l)
          : l,
    )
    .join('\n');
}

function listLine(r: RequestView): string {
  const high = r.findings.filter((f) => f.severity === 'high').length;
  return `${r.id}  ${r.status.padEnd(9)} ${r.slug.padEnd(24)} ${r.kind.padEnd(10)} ${age(r.createdAt).padStart(4)}  ${high ? `${high} high ` : ''}${forTerminalLine(r.justification).slice(0, 60)}`;
}

/** JSON for machines, with nothing a terminal would act on (lossless: the strings parse back whole). */
const json = (io: CliIo, v: unknown) => io.stdout(`${jsonText(v, 2)}\n`);

export async function superviseCommand(args: string[], io: CliIo, deps: CliDeps): Promise<number> {
  const { target, rest: argv } = takeTarget(args, io.env);
  const [sub, ...rest] = argv;
  if (sub === '-h' || sub === '--help' || sub === 'help') {
    io.stdout(SUPERVISE_USAGE);
    return 0;
  }
  if (sub === undefined || sub === 'inbox') {
    if (!io.isTTY && sub === undefined) return superviseCommand([...args, 'list'], io, deps);
    // The inbox draws on a terminal; without one it would fail deep in its renderer.
    if (!io.isTTY)
      throw new UsageError(
        'bb supervise inbox needs a terminal; without one use bb supervise list, show, approve and reject',
        SUPERVISE_USAGE,
      );
    const { runInbox } = await import('./supervise-tui');
    return runInbox(io, deps, target);
  }
  if (sub === 'routes' || sub === 'allowlist') return editCommand(sub, rest, io, deps, target);
  const { values, positionals } = parse(
    rest,
    {
      json: { type: 'boolean' },
      all: { type: 'boolean' },
      status: { type: 'string' },
      scope: { type: 'string' },
      file: { type: 'string' },
      expect: { type: 'string' },
      override: { type: 'boolean' },
      reason: { type: 'string' },
      by: { type: 'string' },
      'write-manifest': { type: 'boolean' },
    },
    SUPERVISE_USAGE,
  );
  if (target.server && values['by'] !== undefined)
    throw new UsageError(
      '--by is for this BB_HOME: a remote orchestrator records you by the name of your token',
      SUPERVISE_USAGE,
    );
  if (target.server && values['scope'] === 'manifest')
    throw new UsageError(
      "--scope manifest shows and writes the bottle manifest on the orchestrator's host: approve there, or use --scope bottle",
      SUPERVISE_USAGE,
    );
  if (target.server && values['write-manifest'])
    throw new UsageError(
      "--write-manifest changes a file on the orchestrator's host: approve there to write the bottle manifest",
      SUPERVISE_USAGE,
    );
  const { port: desk, close } = openPort(io, deps, {
    target,
    by: operator(io, values['by']),
    via: 'cli',
  });
  try {
    const id = () => {
      const v = positionals[0];
      if (!v)
        throw new UsageError(
          `bb supervise ${sub} needs a request id (bb supervise list shows them)`,
          SUPERVISE_USAGE,
        );
      return v;
    };
    switch (sub) {
      case 'list': {
        const status = values['all']
          ? undefined
          : ((values['status'] as RequestStatus | undefined) ?? 'pending');
        const rows = await desk.list(status ? { status } : {});
        if (values['json']) json(io, rows);
        else if (!rows.length)
          io.stdout(`no ${status ?? ''} supervise requests\n`.replace('  ', ' '));
        else io.stdout(`${rows.map((r) => listLine(safeView(r))).join('\n')}\n`);
        return 0;
      }
      case 'show': {
        const r = await desk.show(id());
        if (values['json']) json(io, r);
        else io.stdout(renderRequest(io, r));
        return 0;
      }
      case 'diff':
        io.stdout(`${colourDiff(io, printable((await desk.show(id())).diff))}\n`);
        return 0;
      case 'approve': {
        // Unsaid, each kind's own default: the turn for a proxy change, the bottle for a
        // rebuilt image (which cannot be for one turn).
        const scope = values['scope'] as string | undefined;
        if (scope !== undefined && !SCOPES.includes(scope as DecisionScope))
          throw new UsageError(
            `--scope must be ${SCOPES.join(', ')} (got ${JSON.stringify(scope)})`,
            SUPERVISE_USAGE,
          );
        const file = values['file'] as string | undefined;
        const edited = file ? readFileSync(resolve(io.cwd, file), 'utf8') : undefined;
        const expect = values['expect'] as string | undefined;
        const req = await desk.show(id());
        const out = await desk.approve(req.id, {
          ...(scope ? { scope: scope as DecisionScope } : {}),
          edited,
          ...(expect ? { expect: { candidateHash: expect } } : {}),
          override: !!values['override'],
        });
        let manifest: { file: string; diff: string; written: boolean } | undefined;
        if (
          !target.server &&
          scope === 'manifest' &&
          out.remediation?.ok &&
          out.request.kind !== 'dockerfile'
        )
          manifest = manifestChange(
            io.env,
            readMeta(out.request.slug, io.env),
            out.request.kind,
            out.request.final!,
            !!values['write-manifest'],
          );
        if (values['json']) json(io, { ...out, ...(manifest ? { manifest } : {}) });
        else {
          io.stdout(
            `${out.remediation?.ok ? green(io, out.request.status) : red(io, `${out.request.status}, but not applied`)} ${out.request.id} (${out.request.slug}, scope ${out.request.scope ?? scope}): ${printable(out.remediation?.detail ?? '')}\n`,
          );
          if (manifest)
            io.stdout(
              `${colourDiff(io, manifest.diff)}\n${manifest.written ? `written to ${manifest.file}` : `not written: run again with --write-manifest to change ${manifest.file}`}\n`,
            );
        }
        return out.remediation?.ok ? 0 : 1;
      }
      case 'reject': {
        const reason = values['reason'];
        if (typeof reason !== 'string' || !reason.trim())
          throw new UsageError(
            'bb supervise reject needs --reason TEXT: the agent is told it',
            SUPERVISE_USAGE,
          );
        const r = await desk.reject(id(), reason);
        if (values['json']) json(io, r);
        else io.stdout(`rejected ${r.id} (${r.slug})\n`);
        return 0;
      }
      case 'cancel': {
        const r = await desk.cancel(id());
        if (values['json']) json(io, r);
        else io.stdout(`cancelled ${r.id} (${r.slug})\n`);
        return 0;
      }
      default:
        throw new UsageError(`unknown supervise command ${JSON.stringify(sub)}`, SUPERVISE_USAGE);
    }
  } finally {
    close();
  }
}

/**
 * `bb supervise routes|allowlist edit <slug>`: the operator's own change to a
 * running bottle, in $EDITOR (or from --file), checked, applied by the same
 * reload, and kept like an approved request.
 */
async function editCommand(
  which: 'routes' | 'allowlist',
  argv: string[],
  io: CliIo,
  deps: CliDeps,
  target: DeskTarget,
): Promise<number> {
  const { values, positionals } = parse(
    argv,
    {
      file: { type: 'string' },
      scope: { type: 'string' },
      by: { type: 'string' },
      json: { type: 'boolean' },
      override: { type: 'boolean' },
    },
    SUPERVISE_USAGE,
  );
  const [verb, slug] = positionals;
  if (verb !== 'edit' || !slug)
    throw new UsageError(
      `usage: bb supervise ${which} edit <bottle> [--file F] [--scope turn|bottle]`,
      SUPERVISE_USAGE,
    );
  if (target.server && values['by'] !== undefined)
    throw new UsageError(
      '--by is for this BB_HOME: a remote orchestrator records you by the name of your token',
      SUPERVISE_USAGE,
    );
  if (!target.server && !readMeta(slug, io.env))
    throw new BbError('NOT_FOUND', `no bottle ${slug}: bb orchestrate status lists them`);
  const scope = (values['scope'] as string | undefined) ?? 'bottle';
  if (scope !== 'turn' && scope !== 'bottle')
    throw new UsageError(
      `--scope must be turn or bottle (got ${JSON.stringify(scope)})`,
      SUPERVISE_USAGE,
    );
  const { port: desk, close } = openPort(io, deps, {
    target,
    by: operator(io, values['by']),
    via: 'cli',
  });
  try {
    const current = await desk.current(slug, which);
    let text: string;
    if (typeof values['file'] === 'string')
      text = readFileSync(resolve(io.cwd, values['file']), 'utf8');
    else {
      const edited = editInEditor(io, KINDS[which].file, current);
      if (!edited)
        throw new BbError(
          'INVALID_INPUT',
          'set EDITOR (or VISUAL), or give the new file with --file',
        );
      if (edited.status !== 0)
        throw new BbError(
          'INVALID_INPUT',
          `${edited.editor} exited ${edited.status}: nothing was changed`,
        );
      text = edited.text;
    }
    if (text === current) {
      io.stdout(`no change to ${slug}'s ${KINDS[which].file}\n`);
      return 0;
    }
    // On the host an own edit is the operator's to make; from elsewhere it is checked as a
    // proposal, and goes past the ceiling only with --override.
    const out = await desk.edit(slug, which, text, scope, { override: !!values['override'] });
    if (values['json']) json(io, out);
    else
      io.stdout(
        `${out.remediation?.ok ? green(io, 'applied') : red(io, 'not applied')} ${slug}'s ${KINDS[which].file} (${out.request.id}): ${printable(out.remediation?.detail ?? '')}\n`,
      );
    return out.remediation?.ok ? 0 : 1;
  } finally {
    close();
  }
}
