// I8, warm bottles: a bottle kept warm between turns has its containers paused, and
// only when the host itself saw its turn end. A hostile agent can neither stay at
// work past its turn (by saying the turn ended while it goes on, or by leaving
// processes behind), nor choose the next turn's command, nor make the host follow or
// hang on the word its waiter leaves.
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedTeam } from './harness';

const docker = await probeDocker();
const WARM = 120_000;

describe.skipIf(!docker.ok)('red team: warm bottles', () => {
  const rt = new RedTeam();
  beforeAll(() => rt.start({ 'README.md': '# widgets\n' }));
  afterAll(() => rt.stop());
  const containers = (slug: string) => rt.backend.list({ 'bb.slug': slug });
  const comments = () => rt.gitea.issue('acme/widgets', rt.issue).comments.map((c) => c.body);

  it('an agent that says its turn ended while it goes on is frozen the ordinary way, and what it did after never happens', async () => {
    const run = await rt.launch(
      [
        [
          {
            do: 'sh',
            // The waiter's word, forged, then more work a few seconds on.
            cmd: 'mkdir -p "$HOME/.bb/turn-end" && echo 0 > "$HOME/.bb/turn-end/1-$BB_TURN_NONCE.exit" && sleep 4',
          },
          { do: 'comment', body: 'written after my turn was over' },
        ],
      ],
      { warmMs: WARM, partial: true },
    );
    // Not kept warm: its containers are gone, so the rest of its work never ran.
    expect(run.outcome.warm).toBeUndefined();
    expect(rt.meta(run).warm ?? null).toBeNull();
    expect(await containers(run.slug)).toEqual([]);
    await new Promise((r) => setTimeout(r, 5000));
    expect(comments()).not.toContain('written after my turn was over');
  });

  it('an agent can neither keep a process into its next warm turn, nor write the next turn’s command, nor end it ahead of time', async () => {
    const run = await rt.launch(
      [
        [
          {
            do: 'sh',
            cmd: [
              // Left running, in every way a shell allows.
              '(sleep 301 > /dev/null 2>&1 &)',
              'sh -c \'trap "" HUP TERM INT; exec sleep 302\' > /dev/null 2>&1 &',
              'setsid sleep 303 > /dev/null 2>&1 < /dev/null &',
              // The next turn's command, planted.
              'echo \'{"argv":["sh","-c","echo planted"],"env":{}}\' > /var/bb/turns/2.json && echo WROTE-TURNS',
              'ln -s /tmp/x /var/bb/turns/2.json && echo LINKED-TURNS',
              // Words for later turns, written ahead: every name it could guess.
              'mkdir -p "$HOME/.bb/turn-end"',
              'for i in 2 3 4; do echo 0 > "$HOME/.bb/turn-end/$i.exit"; echo 0 > "$HOME/.bb/turn-end/$i-$BB_TURN_NONCE.exit"; done',
              // They do run while the turn does.
              'sleep 0.5',
              'echo "left running: $(ps -eo args | grep -c "^sleep 30[123]")"',
            ].join('\n'),
            mayFail: true,
          },
          { do: 'done', status: 'success', summary: 'ok' },
        ],
        [
          { do: 'sh', cmd: 'ps -eo args | grep -c "^sleep 30[123]" || true', mayFail: true },
          { do: 'comment', body: 'turn two ran with: {{prompt}}' },
        ],
      ],
      { warmMs: WARM },
    );
    const out = String(run.steps[0]?.['stdout'] ?? '');
    expect(out).toContain('left running: 3');
    expect(out).not.toContain('WROTE-TURNS');
    expect(out).not.toContain('LINKED-TURNS');
    // Kept warm: paused, holding nothing but the engine's init and the waiter.
    expect(run.outcome.warm).toBeDefined();
    const held = await containers(run.slug);
    expect(held.map((c) => c.state)).toEqual(['paused', 'paused']);
    const agent = held.find((c) => c.labels['bb.role'] === 'agent')!;
    expect(await rt.backend.processes(agent.id)).toBe(2);

    const progress: string[] = [];
    const second = await rt.resume(run, 'the host’s own prompt', {
      warmMs: WARM,
      onProgress: (m) => progress.push(m),
    });
    expect(progress.join('\n')).toContain('resuming warm bottle');
    // Nothing of the first turn ran on into the second; the second ran the host's command.
    expect(String(second.steps[0]?.['stdout'] ?? '').trim()).toBe('0');
    expect(second.outcome.output).not.toContain('planted');
    expect(comments()).toContain('turn two ran with: the host’s own prompt');
  });

  it('the waiter’s word planted as a FIFO makes the host neither block nor keep the bottle warm', async () => {
    const began = Date.now();
    const run = await rt.launch(
      [
        [
          {
            do: 'sh',
            cmd: 'mkdir -p "$HOME/.bb/turn-end" && mkfifo "$HOME/.bb/turn-end/1-$BB_TURN_NONCE.exit" && sleep 3',
            mayFail: true,
          },
          { do: 'done', status: 'success', summary: 'ok' },
        ],
      ],
      { warmMs: WARM, partial: true },
    );
    // Read as data, it is no word at all: the turn ended as a failure, the bottle frozen
    // the ordinary way (its agent was still at work), and nothing waited on the FIFO.
    expect(Date.now() - began).toBeLessThan(30_000);
    expect(run.outcome.exitCode).toBe(1);
    expect(run.outcome.warm).toBeUndefined();
    expect(await containers(run.slug)).toEqual([]);
    expect(rt.meta(run).turns).toHaveLength(1);
  });
});
