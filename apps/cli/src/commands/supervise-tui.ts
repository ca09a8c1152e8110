import { errorMessage } from '@bb/errors';
import {
  type DecisionScope,
  printable,
  type RequestView,
  SCOPES,
  type SuperviseDesk,
} from '@bb/supervise';
import { Box, render, Text, useApp, useInput } from 'ink';
import { createElement as h, type ReactNode, useEffect, useRef, useState } from 'react';
import type { CliDeps } from '../deps';
import type { CliIo } from '../io';
import { age, editInEditor, openDesk, safeView } from './supervise-desk';

/** What the inbox asks its caller to do once it has let go of the terminal. */
type Exit =
  | { type: 'quit' }
  | { type: 'modify'; view: RequestView; scope: DecisionScope; override: boolean };

function Inbox(props: {
  desk: SuperviseDesk;
  done: (e: Exit) => void;
  flash?: string;
  scope: DecisionScope;
}): ReactNode {
  const { exit } = useApp();
  // Shown as printable text: the agent wrote most of it.
  const load = () => props.desk.list({ status: 'pending' }).map((r) => safeView(r));
  const [rows, setRows] = useState<RequestView[]>(load);
  const [sel, setSel] = useState(0);
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
  const setMessage = (m: string) => setMessageState(printable(m));
  const refresh = () => setRows(load());
  useEffect(() => {
    const t = setInterval(refresh, 1000);
    return () => clearInterval(t);
  }, []);
  const current = rows[Math.min(sel, rows.length - 1)];
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
        try {
          props.desk.reject(current.id, reason, 'operator');
          setMessage(`rejected ${current.id}`);
        } catch (err) {
          setMessage(errorMessage(err));
        }
        setTyping(undefined);
        return refresh();
      }
      if (key.backspace || key.delete) return setTyping(sofar.slice(0, -1));
      return setTyping(sofar + input);
    }
    if (input === 'q' || key.escape) return leave({ type: 'quit' });
    if (key.upArrow || input === 'k') return setSel(Math.max(0, sel - 1));
    if (key.downArrow || input === 'j') return setSel(Math.min(rows.length - 1, sel + 1));
    if (input === 's') return setScope(SCOPES[(SCOPES.indexOf(scope) + 1) % SCOPES.length]!);
    if (input === 'o') return setOverride(!override);
    if (!current) return;
    if (input === 'r') return setTyping('');
    if (input === 'm') return leave({ type: 'modify', view: current, scope, override });
    if (input === 'a') {
      setBusy(true);
      setMessage(`applying ${current.id}…`);
      props.desk
        .approve(current.id, {
          by: 'operator',
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
          refresh();
        });
    }
  });
  const sevColor = (s: string) => (s === 'high' ? 'red' : s === 'medium' ? 'yellow' : 'gray');
  return h(
    Box,
    { flexDirection: 'column' },
    h(
      Text,
      { bold: true },
      `bot-bottle supervise — ${rows.length} pending   scope: ${scope}${override ? '   OVERRIDE' : ''}`,
    ),
    rows.length === 0
      ? h(Text, { color: 'gray' }, 'no pending requests (waiting for agents to ask)')
      : h(
          Box,
          { flexDirection: 'column', marginTop: 1 },
          ...rows.map((r, i) =>
            h(
              Text,
              { key: r.id, inverse: i === sel },
              `${i === sel ? '>' : ' '} ${r.id}  ${r.slug}  ${r.kind}  ${age(r.createdAt)}${r.findings.some((f) => f.severity === 'high') ? '  !' : ''}${r.rejections >= 3 ? '  looping' : ''}`,
            ),
          ),
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
          h(Text, {}, `why: ${current.justification}`),
          ...current.evidence.map((e) =>
            h(
              Text,
              { key: e.time + e.host, color: 'yellow' },
              `refused: ${e.kind} ${e.host || e.route || ''}${e.port ? `:${e.port}` : ''} — ${e.rule}`,
            ),
          ),
          ...current.findings.map((f, i) =>
            h(Text, { key: `f${i}`, color: sevColor(f.severity) }, `${f.severity}: ${f.message}`),
          ),
          ...current.beyondCeiling.map((b, i) =>
            h(Text, { key: `c${i}`, color: 'red' }, `beyond the ceiling: ${b}`),
          ),
          h(
            Box,
            { flexDirection: 'column', marginTop: 1 },
            ...current.diff
              .split('\n')
              .filter((l) => l && !l.startsWith('====') && !l.startsWith('Index'))
              .map((l, i, all) =>
                i === 29 && all.length > 30
                  ? `… ${all.length - 29} more lines: bb supervise diff ${current.id}`
                  : l,
              )
              .slice(0, 30)
              .map((l, i) =>
                h(
                  Text,
                  {
                    key: `d${i}`,
                    ...(l.startsWith('+') && !l.startsWith('+++')
                      ? { color: 'green' }
                      : l.startsWith('-') && !l.startsWith('---')
                        ? { color: 'red' }
                        : {}),
                  },
                  l,
                ),
              ),
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
  );
}

/** `bb supervise` on a terminal: the inbox over every bottle of this BB_HOME. */
export async function runInbox(io: CliIo, deps: CliDeps): Promise<number> {
  const { desk, close } = openDesk(io, deps);
  let scope: DecisionScope = 'turn';
  let flash: string | undefined;
  try {
    for (;;) {
      let result: Exit = { type: 'quit' };
      const app = render(
        h(Inbox, { desk, done: (e) => (result = e), scope, ...(flash ? { flash } : {}) }),
        { exitOnCtrlC: true },
      );
      await app.waitUntilExit();
      flash = undefined;
      const r = result as Exit;
      if (r.type === 'quit') return 0;
      scope = r.scope;
      flash = await modify(io, desk, r);
    }
  } finally {
    close();
  }
}

/** Open the proposal in $EDITOR; approve the edited file (modified) if it changed. */
async function modify(
  io: CliIo,
  desk: SuperviseDesk,
  e: Extract<Exit, { type: 'modify' }>,
): Promise<string> {
  try {
    const r = editInEditor(io, e.view.file, e.view.candidate);
    if (!r) return 'set EDITOR (or VISUAL) to modify a proposal';
    if (r.status !== 0) return `${r.editor} exited ${r.status}: nothing decided`;
    const edited = r.text;
    const out = await desk.approve(e.view.id, {
      by: 'operator',
      scope: e.view.kind === 'dockerfile' && e.scope === 'turn' ? 'bottle' : e.scope,
      override: e.override,
      edited,
      expect: { baseHash: e.view.baseHash, candidateHash: e.view.candidateHash },
    });
    return `${out.request.status} ${e.view.id}: ${out.remediation?.detail ?? ''}`;
  } catch (err) {
    return errorMessage(err);
  }
}
