import { errorMessage } from '@bb/errors';
import {
  type DecisionScope,
  type DeskPort,
  printable,
  type RequestView,
  SCOPES,
} from '@bb/supervise';
import { Box, render, Text, useApp, useInput, useStdout } from 'ink';
import { createElement as h, type ReactNode, useEffect, useRef, useState } from 'react';
import type { CliDeps } from '../deps';
import type { CliIo } from '../io';
import { age, type DeskTarget, editInEditor, openPort, operator, safeView } from './supervise-desk';

/** What the inbox asks its caller to do once it has let go of the terminal. */
type Exit =
  | { type: 'quit' }
  | { type: 'modify'; view: RequestView; scope: DecisionScope; override: boolean };

/** The diff's lines as the inbox shows them (file headers and separators dropped). */
export function diffLines(diff: string): string[] {
  return diff.split('\n').filter((l) => l && !l.startsWith('====') && !l.startsWith('Index'));
}

/**
 * How many diff lines fit under the rest of the screen: the terminal's height
 * less the header, the list and the request's details (at least 5).
 */
export function diffHeight(screenRows: number, listRows: number, detailRows: number): number {
  // header, blank, list, blank, details, blank, the scroll line, keys, message, progress
  return Math.max(5, screenRows - (1 + 1 + Math.max(1, listRows) + 1 + detailRows + 1 + 1 + 3));
}

/** `text` cut to fill at most `rows` rows of `cols` columns, ending in … when cut. */
export function fitRows(text: string, cols: number, rows: number): string {
  const flat = text.replace(/\s*\n\s*/g, ' ');
  const max = Math.max(1, cols * rows);
  return flat.length <= max ? flat : `${flat.slice(0, max - 1)}…`;
}

const LIST_ROWS = 8;
const SEVERITY_ORDER: Record<string, number> = { high: 0, medium: 1, low: 2, info: 3 };
const sevColor = (s: string) => (s === 'high' ? 'red' : s === 'medium' ? 'yellow' : 'gray');

/**
 * A request's refusals, findings and ceiling breaches as the inbox shows them: at
 * most a few of each, the most severe findings first, and how many more there are.
 */
export function detailLines(r: RequestView): Array<{ text: string; color?: string }> {
  const few = <T>(
    all: T[],
    max: number,
    line: (x: T) => { text: string; color?: string },
    what: string,
  ) => [
    ...all.slice(0, max).map(line),
    ...(all.length > max
      ? [
          {
            text: `… and ${all.length - max} more ${what}: bb supervise show ${r.id}`,
            color: 'gray',
          },
        ]
      : []),
  ];
  return [
    ...few(
      r.evidence,
      3,
      (e) => ({
        text: `refused: ${e.kind} ${e.host || e.route || ''}${e.port ? `:${e.port}` : ''} — ${e.rule}`,
        color: 'yellow',
      }),
      'refusals',
    ),
    ...few(
      [...r.findings].sort(
        (a, b) => (SEVERITY_ORDER[a.severity] ?? 9) - (SEVERITY_ORDER[b.severity] ?? 9),
      ),
      5,
      (f) => ({ text: `${f.severity}: ${f.message}`, color: sevColor(f.severity) }),
      'findings',
    ),
    ...few(
      r.beyondCeiling,
      3,
      (b) => ({ text: `beyond the ceiling: ${b}`, color: 'red' }),
      'beyond the ceiling',
    ),
  ];
}

function Inbox(props: {
  port: DeskPort;
  done: (e: Exit) => void;
  flash?: string;
  scope: DecisionScope;
  /** Where an image build's lines are sent while the inbox is up (drawn in it, not over it). */
  progress: { listener?: ((line: string) => void) | undefined };
  refreshMs: number;
  /** The scopes `s` cycles through (a remote desk writes no manifest). */
  scopes: readonly DecisionScope[];
}): ReactNode {
  const { scopes } = props;
  const { exit } = useApp();
  const { stdout } = useStdout();
  const stdoutRef = useRef(stdout);
  stdoutRef.current = stdout;
  const [rows, setRows] = useState<RequestView[]>([]);
  const [loaded, setLoaded] = useState(false);
  // The chosen request, by id: when the list changes under it, the keys never move to
  // another one. `lost`: it was decided elsewhere (or ended) and nothing is chosen.
  const [selId, setSelId] = useState<string | undefined>(undefined);
  const chosen = useRef<{ id: string | undefined; index: number; lost: boolean; mine?: string }>({
    id: undefined,
    index: 0,
    lost: false,
  });
  const [top, setTop] = useState(0);
  const [scope, setScope] = useState<DecisionScope>(props.scope);
  const [override, setOverride] = useState(false);
  const [typing, setTypingState] = useState<string | undefined>(undefined);
  // Keys can come faster than renders: what was typed is kept here too, not only in state.
  const typed = useRef<string | undefined>(undefined);
  const setTyping = (v: string | undefined) => {
    typed.current = v;
    setTypingState(v);
  };
  const [busy, setBusy] = useState(false);
  const [message, setMessageState] = useState(printable(props.flash ?? ''));
  // A message (a failed build's, say) takes three rows at most.
  const setMessage = (m: string) =>
    setMessageState(fitRows(printable(m), stdoutRef.current?.columns ?? 80, 3));
  const [building, setBuilding] = useState('');
  const loading = useRef(false);
  const refresh = () => {
    if (loading.current) return;
    loading.current = true;
    props.port
      // Shown as printable text: the agent wrote most of it.
      .list({ status: 'pending' })
      .then(
        (r) => {
          const views = r.map((x) => safeView(x));
          setRows(views);
          setLoaded(true);
          const c = chosen.current;
          const at = views.findIndex((v) => v.id === c.id);
          if (at >= 0) c.index = at;
          else if (c.id !== undefined && c.id !== c.mine) {
            // Decided elsewhere (the API, the forge, auto mode) or ended with its turn: what
            // was set up for it goes with it, and nothing else takes its place unseen.
            const gone = c.id;
            c.id = undefined;
            c.lost = true;
            setSelId(undefined);
            setOverride(false);
            setTyping(undefined);
            setTop(0);
            setMessage(`${gone} was decided elsewhere or ended: choose a request with ↑↓`);
          } else if (!c.lost && views.length) {
            // The first list, or after a decision of ours: the request at the same place.
            const i = Math.min(c.index, views.length - 1);
            c.id = views[i]!.id;
            c.index = i;
            setSelId(c.id);
          }
        },
        (err) => setMessage(`${props.port.where}: ${errorMessage(err)}`),
      )
      .finally(() => {
        loading.current = false;
      });
  };
  useEffect(() => {
    refresh();
    const t = setInterval(refresh, props.refreshMs);
    props.progress.listener = (l) => setBuilding(printable(l).slice(0, 200));
    return () => {
      clearInterval(t);
      props.progress.listener = undefined;
    };
  }, []);
  const sel = rows.findIndex((r) => r.id === selId);
  const current = sel >= 0 ? rows[sel] : undefined;
  const lines = current ? diffLines(current.diff) : [];
  // The details are cut to a few lines each (the worst findings first): a proposal of a
  // hundred hosts must not push the diff, the keys and the list off the screen.
  const notes = current ? detailLines(current) : [];
  const cols = stdout?.columns ?? 80;
  // The agent's reason, on three rows at most (all of it: bb supervise show).
  const why = current ? fitRows(`why: ${current.justification}`, cols, 3) : '';
  const details =
    (current ? 1 + Math.ceil(why.length / cols) + notes.length : 0) +
    Math.max(0, Math.ceil(message.length / cols) - 1);
  // The list shows up to 8 requests around the chosen one, and says how many more wait.
  const listFrom = Math.max(0, Math.min(sel - 3, rows.length - LIST_ROWS));
  const listed = rows.slice(listFrom, listFrom + LIST_ROWS);
  const more = rows.length - listed.length;
  const height = diffHeight(stdout?.rows ?? 24, listed.length + (more ? 1 : 0), details);
  const maxTop = Math.max(0, lines.length - height);
  const shownTop = Math.min(top, maxTop);
  const choose = (i: number) => {
    const r = rows[i];
    if (!r) return;
    chosen.current = { id: r.id, index: i, lost: false };
    setSelId(r.id);
    // An override is for the request it was set for: choosing another ends it.
    if (r.id !== selId) setOverride(false);
    setTop(0);
  };
  const leave = (e: Exit) => {
    props.done(e);
    exit();
  };
  useInput((input, key) => {
    if (busy) return;
    const sofar = typed.current;
    if (sofar !== undefined) {
      if (key.escape) return setTyping(undefined);
      // A pasted reason may arrive with its Enter in one piece.
      const ends = key.return || /[\r\n]/.test(input);
      if (ends) {
        const reason = `${sofar}${key.return ? '' : input.split(/[\r\n]/)[0]}`.trim();
        if (!current || !reason) return setMessage('a rejection needs a reason');
        setTyping(undefined);
        setBusy(true);
        chosen.current.mine = current.id;
        props.port
          .reject(current.id, reason)
          .then(
            () => setMessage(`rejected ${current.id}`),
            (err) => setMessage(errorMessage(err)),
          )
          .finally(() => {
            setBusy(false);
            refresh();
          });
        return;
      }
      if (key.backspace || key.delete) return setTyping(sofar.slice(0, -1));
      return setTyping(sofar + input);
    }
    if (input === 'q' || key.escape) return leave({ type: 'quit' });
    // With nothing chosen, a move chooses the request nearest where the last one was.
    const from = sel >= 0 ? sel : Math.min(chosen.current.index, rows.length - 1);
    if (key.upArrow || input === 'k') return choose(sel >= 0 ? Math.max(0, sel - 1) : from);
    if (key.downArrow || input === 'j')
      return choose(sel >= 0 ? Math.min(rows.length - 1, sel + 1) : from);
    // The diff scrolls: a page at a time, or a line with J and K.
    if (key.pageDown || input === ' ') return setTop(Math.min(maxTop, shownTop + height - 1));
    if (key.pageUp || input === 'b') return setTop(Math.max(0, shownTop - (height - 1)));
    if (input === 'J') return setTop(Math.min(maxTop, shownTop + 1));
    if (input === 'K') return setTop(Math.max(0, shownTop - 1));
    if (input === 's') return setScope(scopes[(scopes.indexOf(scope) + 1) % scopes.length]!);
    if (input === 'o') return setOverride(!override);
    if (!current) return;
    if (input === 'r') return setTyping('');
    if (input === 'm') return leave({ type: 'modify', view: current, scope, override });
    if (input === 'a') {
      setBusy(true);
      setBuilding('');
      setMessage(`applying ${current.id}…`);
      chosen.current.mine = current.id;
      props.port
        .approve(current.id, {
          // A rebuilt image stays with its bottle.
          scope: current.kind === 'dockerfile' && scope === 'turn' ? 'bottle' : scope,
          override,
          // Bound to what is on the screen: a proposal that changed must be seen again.
          expect: { baseHash: current.baseHash, candidateHash: current.candidateHash },
        })
        .then(
          (o) => setMessage(`${o.request.status} ${current.id}: ${o.remediation?.detail ?? ''}`),
          (err) => setMessage(errorMessage(err)),
        )
        .finally(() => {
          // An override is for one decision: it never carries over to the next request.
          setOverride(false);
          setBusy(false);
          setBuilding('');
          refresh();
        });
    }
  });
  return h(
    Box,
    { flexDirection: 'column' },
    h(
      Text,
      { bold: true },
      `bot-bottle supervise — ${loaded ? rows.length : '…'} pending   scope: ${scope}${override ? '   OVERRIDE' : ''}   ${props.port.where}`,
    ),
    rows.length === 0
      ? h(
          Text,
          { color: 'gray' },
          loaded ? 'no pending requests (waiting for agents to ask)' : 'loading…',
        )
      : h(
          Box,
          { flexDirection: 'column', marginTop: 1 },
          ...listed.map((r, j) => {
            const i = listFrom + j;
            return h(
              Text,
              { key: r.id, inverse: i === sel, wrap: 'truncate-end' },
              `${i === sel ? '>' : ' '} ${r.id}  ${r.slug}  ${r.kind}  ${age(r.createdAt)}${r.findings.some((f) => f.severity === 'high') ? '  !' : ''}${r.rejections >= 3 ? '  looping' : ''}`,
            );
          }),
          more
            ? h(
                Text,
                { color: 'gray' },
                `  ${more} more (${listFrom} above, ${rows.length - listFrom - listed.length} below): ↑↓`,
              )
            : null,
        ),
    current
      ? h(
          Box,
          { flexDirection: 'column', marginTop: 1 },
          h(
            Text,
            {},
            `bottle ${current.slug}  turn ${current.turn ?? '-'}  ${current.kind} (${current.file}) via ${current.tool}`,
          ),
          h(Text, {}, why),
          ...notes.map((n, i) =>
            h(
              Text,
              { key: `n${i}`, wrap: 'truncate-end', ...(n.color ? { color: n.color } : {}) },
              n.text,
            ),
          ),
          h(
            Box,
            { flexDirection: 'column', marginTop: 1 },
            ...lines.slice(shownTop, shownTop + height).map((l, i) =>
              h(
                Text,
                {
                  key: `d${shownTop + i}`,
                  wrap: 'truncate-end',
                  ...(l.startsWith('+') && !l.startsWith('+++')
                    ? { color: 'green' }
                    : l.startsWith('-') && !l.startsWith('---')
                      ? { color: 'red' }
                      : {}),
                },
                l,
              ),
            ),
            lines.length > height
              ? h(
                  Text,
                  { color: 'gray' },
                  `diff lines ${shownTop + 1}–${Math.min(lines.length, shownTop + height)} of ${lines.length}   PgDn/space PgUp/b page, J/K line`,
                )
              : null,
          ),
        )
      : null,
    typing !== undefined
      ? h(
          Text,
          { color: 'cyan' },
          `reason for rejecting ${current?.id}: ${typing}█  (Enter to send, Esc to cancel)`,
        )
      : h(
          Text,
          { color: 'gray' },
          'a approve  m modify in $EDITOR  r reject  s scope  o override  ↑↓ choose  q quit',
        ),
    message ? h(Text, {}, message) : null,
    building ? h(Text, { color: 'gray', wrap: 'truncate-end' }, `build: ${building}`) : null,
  );
}

/** `bb supervise` on a terminal: the inbox over every bottle of this BB_HOME, or of a remote orchestrator. */
export async function runInbox(io: CliIo, deps: CliDeps, target: DeskTarget): Promise<number> {
  const progress: { listener?: ((line: string) => void) | undefined } = {};
  const { port, remote, close } = openPort(io, deps, {
    target,
    by: operator(io),
    via: 'tui',
    // Drawn in the inbox, never written over it.
    onProgress: (l) => progress.listener?.(l),
  });
  let scope: DecisionScope = 'turn';
  let flash: string | undefined;
  try {
    for (;;) {
      let result: Exit = { type: 'quit' };
      const app = render(
        h(Inbox, {
          port,
          done: (e) => (result = e),
          scope,
          progress,
          refreshMs: remote ? 2000 : 1000,
          scopes: remote ? (['turn', 'bottle'] as const) : SCOPES,
          ...(flash ? { flash } : {}),
        }),
        { exitOnCtrlC: true },
      );
      await app.waitUntilExit();
      flash = undefined;
      const r = result as Exit;
      if (r.type === 'quit') return 0;
      scope = r.scope;
      flash = await modify(io, port, r);
    }
  } finally {
    close();
  }
}

/** Open the proposal in $EDITOR; approve the edited file (modified) if it changed. */
async function modify(
  io: CliIo,
  port: DeskPort,
  e: Extract<Exit, { type: 'modify' }>,
): Promise<string> {
  try {
    const r = editInEditor(io, e.view.file, e.view.candidate);
    if (!r) return 'set EDITOR (or VISUAL) to modify a proposal';
    if (r.status !== 0) return `${r.editor} exited ${r.status}: nothing decided`;
    const out = await port.approve(e.view.id, {
      scope: e.view.kind === 'dockerfile' && e.scope === 'turn' ? 'bottle' : e.scope,
      override: e.override,
      edited: r.text,
      expect: { baseHash: e.view.baseHash, candidateHash: e.view.candidateHash },
    });
    return `${out.request.status} ${e.view.id}: ${out.remediation?.detail ?? ''}`;
  } catch (err) {
    return errorMessage(err);
  }
}
