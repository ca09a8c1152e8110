import { describe, expect } from 'vitest';
import { suiteTest } from '../suite-test';
import { type AgentProvider, PROXY_API_KEY, type TurnInput } from './provider';

export interface ProviderConformanceOptions {
  provider: AgentProvider;
  /**
   * What the CLI really printed for a turn that ended well (record it from a
   * run), and what it must be read as: the session id, and the input tokens
   * when the CLI reports usage.
   */
  recorded: { stdout: string; exitCode: number; sessionId: string; tokens?: number };
  /** What it printed for a turn the model API failed, when the CLI says so (pi exits 0 then). */
  failed?: { stdout: string; exitCode: number };
  /**
   * What it printed before it was stopped mid-turn (a rebuild's approval, the
   * watchdog), and the session that output already names: the next turn resumes
   * it rather than starting over. Absent for a CLI that names its session only at its end.
   */
  stopped?: { stdout: string; exitCode: number; sessionId: string };
  skip?: { reason: string; tests: string[] };
}

const input = (over: Partial<TurnInput> = {}): TurnInput => ({
  prompt: 'fix the bug',
  home: '/home/agent',
  runtimeDir: '/opt/bb',
  socket: '/run/bb/forge.sock',
  ...over,
});

/** Flags that would resume "the latest" session instead of the one named. */
const LATEST = ['--continue', '--last', '--resume-last', 'continue', '-r'];

const GARBLED = [
  '',
  'Segmentation fault (core dumped)\n',
  '{"type":"result"',
  '{"unexpected":true}\n',
  '\u0000\u00ff\u001b[31mnot json\n',
];

/**
 * The behaviour every agent provider must have (`registerProvider`): the
 * prompt is one argv element as given; a session is resumed by its id, never
 * "the latest"; a recorded turn is read (session id, usage); garbled output or
 * a failing exit is never a success; the model API is the bottle's bridge with
 * a placeholder key, never a real one.
 */
export function describeProviderConformance(name: string, o: ProviderConformanceOptions): void {
  const p = o.provider;
  describe(`Provider conformance: ${name}`, () => {
    const test = suiteTest(o.skip);

    test('the prompt is one argv element, exactly as given', () => {
      for (const prompt of [
        '--help',
        '-rf /',
        'it\'s "quoted", $HOME and `date`;\nline two && exit 1',
        ' leading and trailing spaces ',
      ]) {
        const { cmd } = p.invocation(input({ prompt }));
        expect(cmd.filter((a) => a === prompt)).toHaveLength(1);
        // Nowhere else, not even inside a shell line.
        expect(cmd.filter((a) => a !== prompt && a.includes(prompt.trim()))).toEqual([]);
      }
    });

    test('resumes the exact session by its id, never the latest', () => {
      const first = p.invocation(input()).cmd;
      const a = p.invocation(input({ sessionId: 'bb-session-a1' })).cmd;
      const b = p.invocation(input({ sessionId: 'bb-session-b2' })).cmd;
      expect(a).toContain('bb-session-a1');
      expect(first).not.toContain('bb-session-a1');
      // Two sessions differ in their id only.
      expect(a.map((x) => (x === 'bb-session-a1' ? 'bb-session-b2' : x))).toEqual(b);
      for (const cmd of [first, a]) for (const flag of LATEST) expect(cmd).not.toContain(flag);
    });

    test('reads a recorded turn: its session id, success and usage', () => {
      const r = p.parseResult(o.recorded.stdout, o.recorded.exitCode);
      expect(r.ok).toBe(true);
      expect(r.sessionId).toBe(o.recorded.sessionId);
      if (o.recorded.tokens !== undefined) expect(r.tokens).toBe(o.recorded.tokens);
    });

    test('a turn stopped mid-way still names its session, and is not a success', () => {
      if (!o.stopped) return;
      const r = p.parseResult(o.stopped.stdout, o.stopped.exitCode);
      expect(r.sessionId).toBe(o.stopped.sessionId);
      expect(r.ok).toBe(false);
    });

    test('garbled output, or a failing exit, is never a success', () => {
      for (const stdout of GARBLED)
        for (const exitCode of [0, 1]) {
          const r = p.parseResult(stdout, exitCode);
          expect(r.ok, JSON.stringify({ stdout, exitCode })).toBe(false);
          expect(r.error).toBeTruthy();
        }
      expect(p.parseResult(o.recorded.stdout, 1).ok).toBe(false);
      if (o.failed) expect(p.parseResult(o.failed.stdout, o.failed.exitCode).ok).toBe(false);
    });

    test('reaches its model API through the bridge with a placeholder key only', () => {
      for (const kind of p.modelApis) {
        const baseUrl = `http://127.0.0.1:4319/${kind}`;
        const inv = p.invocation(input({ modelApi: { kind, baseUrl } }));
        const said = JSON.stringify(inv);
        expect(said, `${kind}: the bridge's URL is given to the CLI`).toContain(baseUrl);
        for (const key of ['sk-', 'sk-ant-', 'Bearer ']) expect(said).not.toContain(key);
        expect(said).toContain(PROXY_API_KEY);
      }
      // Without a bridge it is given no key at all.
      expect(JSON.stringify(p.invocation(input()))).not.toContain(PROXY_API_KEY);
    });
  });
}
