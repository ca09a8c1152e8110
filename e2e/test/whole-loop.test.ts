// The whole loop on a real Docker engine: the Gitea-compatible test server sends
// real signed webhooks to the orchestrator over HTTP; a script agent runs in a
// bottle, opens a PR and signals done; a human comment resumes the same session;
// the merge destroys the bottle. Provenance is recorded for each turn.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { bottleDir } from '@bb/headless';
import { loadOrCreateSigningKey, verifyChain } from '@bb/provenance';
import { probeDocker } from '@bb/tooling/docker';
import { describe, expect, it } from 'vitest';
import { useLoop } from './loop';
import { fileIssue, forgeWorld, prTurn, rememberTurn, scriptAgent, until } from './support';

const docker = await probeDocker();
const TOKEN = 'bb-claude-token-whole-loop-77';
const SECRET = 'whole-loop-webhook-secret';
describe.skipIf(!docker.ok)('real Docker: webhooks in, bottles out', () => {
  const loop = useLoop({
    prefix: 'bb-loop-',
    agents: {
      implementer: scriptAgent([
        prTurn({ pr: { title: 'Fix the thing' } }),
        // The PR it opened in turn one is still in its write scope.
        rememberTurn('Answered.', [{ do: 'comment', number: 2, body: 'Handled on the PR.' }]),
      ]),
    },
    token: TOKEN,
    secret: SECRET,
    world: forgeWorld(TOKEN),
  });

  it('issue → bottle → PR → done → frozen → comment → resumed → merged → destroyed', async () => {
    const { home, gitea, orch, store, prov, backend, logs } = loop();
    const n = fileIssue(gitea, 'implementer', 'Fix the thing', 'It is broken.');
    const frozen = await until('the first turn to end frozen with a PR', () => {
      const row = store.get('acme', 'widgets', n);
      return row?.status === 'frozen' && row.prNumber ? row : undefined;
    });
    await orch.settled();
    expect(gitea.issue('acme/widgets', n).comments.map((c) => c.body)).toContain('PR is up.');
    const pr = frozen.prNumber!;
    expect(gitea.issue('acme/widgets', pr).pull?.headRef).toBe(`bb/implementer-${n}`);
    expect(prov.chain(frozen.slug)).toHaveLength(1);
    expect(prov.chain(frozen.slug)[0]!.record.done).toEqual({
      status: 'success',
      summary: 'Opened the PR.',
    });

    // A replayed delivery (new UUID) launches nothing.
    await gitea.settle();
    gitea.replay(gitea.deliveries.find((d) => d.eventType === 'issues')!.uuid);
    await gitea.settle();
    await orch.settled();
    // No second bottle: this BB_HOME still holds exactly the one (other test files may
    // run containers at the same time, so look at this home's bottles, not the engine's).
    expect(readdirSync(join(home, 'bottles'))).toEqual([frozen.slug]);
    expect(await backend.list({ 'bb.slug': frozen.slug })).toEqual([]);
    expect(prov.chain(frozen.slug)).toHaveLength(1);

    // The bot's own comment (already delivered) did not resume; a human one does.
    gitea.comment('alice', 'acme/widgets', pr, 'Please also handle empty widgets.');
    await until('the resumed turn to be recorded', () =>
      prov.chain(frozen.slug).length === 2 ? true : undefined,
    );
    await orch.settled();
    expect(gitea.issue('acme/widgets', n).comments.at(-1)!.body).toContain('Turn 2: I remember');
    expect(pr).toBe(2);
    expect(gitea.issue('acme/widgets', pr).comments.at(-1)!.body).toBe('Handled on the PR.');
    const chain = prov.chain(frozen.slug);
    expect(verifyChain(chain, loadOrCreateSigningKey(home).publicKey).ok).toBe(true);
    expect(store.get('acme', 'widgets', n)?.sessionId).toBe(frozen.sessionId);

    // The merge destroys the bottle; provenance stays.
    await gitea.mergePr('alice', 'acme/widgets', pr);
    await until('the bottle to be destroyed', () =>
      store.get('acme', 'widgets', n)?.status === 'destroyed' ? true : undefined,
    );
    await orch.settled();
    expect(await backend.list({ 'bb.slug': frozen.slug })).toEqual([]);
    expect(existsSync(bottleDir(frozen.slug, { BB_HOME: home }))).toBe(false);
    expect(prov.chain(frozen.slug)).toHaveLength(2);
    expect(logs.some((l) => String(l['msg']).startsWith('event failed'))).toBe(false);
  }, 120_000);
});
