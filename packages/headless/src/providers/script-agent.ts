/**
 * The script agent: a deterministic stand-in for an AI agent, used by tests and
 * the demo. It follows `$BB_AGENT_HOME/.bb/script.json` one turn per run, talks to
 * the forge only through the sidecar, edits and commits in its workspace, and
 * keeps a transcript in its home, so a resumed run can show it sees earlier turns.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { ForgeSidecarClient } from '@bb/forge-sidecar';
import { z } from 'zod';

const Step = z.discriminatedUnion('do', [
  z.object({ do: z.literal('read_issue'), number: z.number().int().positive().optional() }),
  z.object({ do: z.literal('read_comments'), number: z.number().int().positive().optional() }),
  z.object({
    do: z.literal('comment'),
    number: z.number().int().positive().optional(),
    body: z.string(),
  }),
  z.object({ do: z.literal('write'), path: z.string(), content: z.string() }),
  z.object({ do: z.literal('commit'), message: z.string() }),
  z.object({ do: z.literal('open_pr'), title: z.string(), body: z.string().default('') }),
  z.object({ do: z.literal('push') }),
  z.object({
    do: z.literal('done'),
    status: z.enum(['success', 'failure', 'blocked']),
    summary: z.string(),
  }),
  z.object({ do: z.literal('sleep'), ms: z.number().int().min(0).max(3_600_000) }),
  z.object({ do: z.literal('exit'), code: z.number().int().min(0).max(255) }),
  // What any real agent's shell tool can do: run a command in the bottle (git,
  // symlinks, modes, network attempts), as the agent's own user.
  z.object({
    do: z.literal('sh'),
    cmd: z.string(),
    /** Go on when the command fails (its exit code is printed either way). */
    mayFail: z.boolean().default(false),
  }),
  // Any sidecar call with any params, as a hostile agent sends them.
  z.object({
    do: z.literal('call'),
    method: z.string(),
    params: z.record(z.string(), z.unknown()).default({}),
    mayFail: z.boolean().default(false),
  }),
]);
export const AgentScriptSchema = z.object({
  turns: z.array(z.object({ steps: z.array(Step) })).min(1),
});
export type AgentScript = z.infer<typeof AgentScriptSchema>;

interface TranscriptLine {
  turn: number;
  sessionId: string;
  prompt: string;
  time: string;
}

function out(obj: Record<string, unknown>): void {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

export async function runScriptAgent(argv: string[], env: NodeJS.ProcessEnv): Promise<number> {
  const arg = (name: string) => {
    const i = argv.indexOf(name);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const prompt = arg('--prompt') ?? '';
  const resumeId = arg('--resume');
  const home = env['BB_AGENT_HOME'] ?? env['HOME'] ?? '/home/bottle';
  const workspace = env['BB_WORKSPACE_DIR'] ?? process.cwd();
  const bb = join(home, '.bb');
  mkdirSync(bb, { recursive: true });
  const transcriptFile = join(bb, 'transcript.jsonl');
  const sessionFile = join(bb, 'session');
  const fail = (code: number, error: string) => {
    out({ type: 'result', is_error: true, error });
    return code;
  };

  let sessionId: string;
  if (resumeId) {
    const stored = existsSync(sessionFile) ? readFileSync(sessionFile, 'utf8').trim() : '';
    if (stored !== resumeId)
      return fail(3, `no session ${resumeId} in this home (have ${stored || 'none'})`);
    sessionId = resumeId;
  } else {
    // A run without --resume starts a new conversation, as the real CLIs do (a
    // rotated session): the earlier one stays in the transcript.
    sessionId = randomUUID();
    writeFileSync(sessionFile, `${sessionId}\n`);
  }

  let script: AgentScript;
  try {
    script = AgentScriptSchema.parse(JSON.parse(readFileSync(join(bb, 'script.json'), 'utf8')));
  } catch (err) {
    return fail(2, `cannot read ${join(bb, 'script.json')}: ${(err as Error).message}`);
  }
  const all: TranscriptLine[] = existsSync(transcriptFile)
    ? readFileSync(transcriptFile, 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as TranscriptLine)
    : [];
  // What this conversation remembers is its own turns; the script goes on counting all of them.
  const previous = all.filter((l) => l.sessionId === sessionId);
  const turn = all.length + 1;
  const steps = (script.turns[turn - 1] ?? script.turns.at(-1)!).steps;
  appendFileSync(
    transcriptFile,
    `${JSON.stringify({ turn, sessionId, prompt, time: new Date().toISOString() } satisfies TranscriptLine)}\n`,
  );
  out({
    type: 'turn',
    session_id: sessionId,
    turn,
    previous_prompts: previous.map((p) => p.prompt),
  });

  const client = new ForgeSidecarClient({
    socketPath: env['BB_SIDECAR_SOCKET'] ?? '/run/bb/forge.sock',
  });
  // Asked of the sidecar only when a step needs it: a bottle may have no forge.
  let issue = 0;
  const issueNumber = async () => {
    issue ||= (await client.health()).issue;
    return issue;
  };
  const template = (text: string) =>
    text
      .replaceAll('{{prompt}}', prompt)
      .replaceAll('{{turn}}', String(turn))
      .replaceAll('{{issue}}', String(issue))
      .replaceAll('{{session}}', sessionId)
      .replaceAll('{{previousPrompts}}', previous.map((p) => p.prompt).join(' | '));
  // What a model would read this turn: the conversation so far, about four characters a token.
  const usage = () => ({
    input_tokens: Math.ceil([...previous.map((p) => p.prompt), prompt].join('').length / 4),
  });
  const git = (...args: string[]) =>
    execFileSync('git', ['-C', workspace, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
      .toString()
      .trim();
  try {
    for (const step of steps) {
      if (step.do === 'comment' || step.do === 'read_issue' || step.do === 'read_comments')
        await issueNumber();
      switch (step.do) {
        case 'read_issue':
          out({
            type: 'step',
            do: step.do,
            title: (await client.readIssue(step.number ?? issue)).title,
          });
          break;
        case 'read_comments':
          out({
            type: 'step',
            do: step.do,
            comments: (await client.readComments(step.number ?? issue)).map((c) => c.body),
          });
          break;
        case 'comment':
          out({
            type: 'step',
            do: step.do,
            id: (await client.postComment(step.number ?? issue, template(step.body))).id,
          });
          break;
        case 'write': {
          const file = resolve(workspace, step.path);
          if (!file.startsWith(`${resolve(workspace)}/`))
            throw new Error(`write outside the workspace: ${step.path}`);
          mkdirSync(dirname(file), { recursive: true });
          writeFileSync(file, template(step.content));
          out({ type: 'step', do: step.do, path: step.path });
          break;
        }
        case 'commit':
          git('add', '-A');
          git('commit', '-q', '-m', template(step.message));
          out({ type: 'step', do: step.do, sha: git('rev-parse', 'HEAD') });
          break;
        case 'open_pr':
          out({
            type: 'step',
            do: step.do,
            number: (
              await client.openPr({ title: template(step.title), body: template(step.body) })
            ).number,
          });
          break;
        case 'push':
          out({ type: 'step', do: step.do, sha: (await client.push()).sha });
          break;
        case 'done':
          await client.signalDone(step.status, template(step.summary));
          out({ type: 'step', do: step.do, status: step.status });
          break;
        case 'sleep':
          await new Promise((r) => setTimeout(r, step.ms));
          out({ type: 'step', do: step.do, ms: step.ms });
          break;
        case 'exit':
          out({ type: 'result', session_id: sessionId, turn, is_error: step.code !== 0 });
          return step.code;
        case 'sh': {
          const r = spawnSync('sh', ['-c', template(step.cmd)], {
            cwd: workspace,
            encoding: 'utf8',
            stdio: ['ignore', 'pipe', 'pipe'],
            maxBuffer: 4 * 1024 * 1024,
          });
          const code = r.status ?? -1;
          out({
            type: 'step',
            do: step.do,
            code,
            stdout: (r.stdout ?? '').slice(-2000),
            stderr: (r.stderr ?? '').slice(-2000),
          });
          if (code !== 0 && !step.mayFail)
            throw new Error(`sh step failed (exit ${code}): ${(r.stderr ?? '').slice(-300)}`);
          break;
        }
        case 'call': {
          try {
            const result = await client.call(step.method, step.params);
            out({ type: 'step', do: step.do, method: step.method, ok: true, result });
          } catch (err) {
            const e = err as Error & { code?: string };
            out({
              type: 'step',
              do: step.do,
              method: step.method,
              ok: false,
              code: e.code,
              error: e.message,
            });
            if (!step.mayFail) throw err;
          }
          break;
        }
      }
    }
  } catch (err) {
    out({
      type: 'result',
      session_id: sessionId,
      turn,
      is_error: true,
      error: (err as Error).message,
    });
    return 1;
  } finally {
    await client.close();
  }
  out({ type: 'result', session_id: sessionId, turn, is_error: false, usage: usage() });
  return 0;
}
