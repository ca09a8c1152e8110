// The second forge kind (Lab, ./lab-forge) passes the Forge conformance suite the
// way its author would run it: against its own server double, with real git pushes
// over its smart-HTTP paths and its own signed webhook deliveries.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describeForgeConformance } from '@bb/forge/testing';
import { labKind } from './lab-forge/kind';
import { LabServer } from './lab-forge/server';

const TOKEN = 'lab-conformance-bot';
const SECRET = 'lab-conformance-secret';
const kind = labKind();
// The server runs in this process: git must not block it.
const run = promisify(execFile);

describeForgeConformance('Lab', {
  create: async () => {
    const lab = await LabServer.start();
    lab.addUser('bot', TOKEN);
    lab.addUser('other-bot');
    lab.addUser('outsider');
    lab.world.addMember('agents', 'bot');
    lab.world.addMember('agents', 'other-bot');
    await lab.addRepo('acme', 'app', { 'README.md': '# app\n' });
    lab.world.grant('acme', 'app', 'bot', 'write');
    const issue = await lab.openIssue('outsider', 'acme', 'app', {
      title: 'Fix it',
      labels: ['bot-bottle:implementer'],
      assignees: ['bot'],
    });
    const forge = kind.fromEnv({ FORGE_LAB_URL: lab.url }).forgeFor({
      owner: 'acme',
      repo: 'app',
      token: TOKEN,
    });
    const remote = forge.gitRemote()!;
    const delivery = lab.signed(
      'acme',
      'app',
      'outsider',
      'issue.comment',
      { comment: { id: 41, body: 'hi', on: issue, isChange: false } },
      SECRET,
    );
    return {
      forge,
      bot: 'bot',
      org: 'agents',
      member: 'other-bot',
      nonMember: 'outsider',
      issue,
      issueTitle: 'Fix it',
      issueLabel: 'bot-bottle:implementer',
      base: 'main',
      changedFile: 'CHANGE.md',
      pushBranch: async (branch) => {
        const work = mkdtempSync(join(tmpdir(), 'bb-lab-push-'));
        const env = {
          PATH: process.env['PATH'] ?? '',
          HOME: work,
          GIT_CONFIG_NOSYSTEM: '1',
          GIT_AUTHOR_NAME: 'bot',
          GIT_AUTHOR_EMAIL: 'bot@lab.test',
          GIT_COMMITTER_NAME: 'bot',
          GIT_COMMITTER_EMAIL: 'bot@lab.test',
        };
        const git = (...args: string[]) => run('git', ['-C', work, ...args], { env });
        try {
          const auth = `http.extraHeader=Authorization: ${remote.headers['Authorization']}`;
          await run('git', ['-c', auth, 'clone', '-q', remote.url, work], { env });
          await git('checkout', '-q', '-b', branch);
          writeFileSync(join(work, 'CHANGE.md'), `one\ntwo\nthree\n${branch}\n`);
          await git('add', 'CHANGE.md');
          await git('commit', '-q', '-m', `change on ${branch}`);
          await git('-c', auth, 'push', '-q', 'origin', branch);
        } finally {
          rmSync(work, { recursive: true, force: true });
        }
      },
      merge: async (pr) => lab.world.merge('acme', 'app', pr),
      review: async (pr, input) => {
        lab.world.review('acme', 'app', pr, { author: 'other-bot', ...input });
      },
      webhooks: [
        {
          name: 'a comment on the issue',
          headers: delivery.headers,
          body: delivery.body,
          secret: SECRET,
          expect: { kind: 'comment_created' },
        },
      ],
      webhook: kind.webhook,
      kind,
      dispose: () => lab.close(),
    };
  },
});
