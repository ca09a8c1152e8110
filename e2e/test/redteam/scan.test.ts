// I1, scanning: after each turn the host scans for secrets the commits the run
// pushed (what left the bottle). The agent's repository configuration,
// attributes and object files must neither run a program on the host (as the
// orchestrator: root, its secrets, the Docker socket) nor blind or fool the scan;
// the scan covers what the run pushed, not the history before it.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedTeam, type Step } from './harness';

const docker = await probeDocker();
// A key gitleaks knows (the AWS documentation's shape, not a live key).
const SECRET_FILE =
  'AWS_KEY = "AKIAIOSFODNN7EXAMPLX"\naws_secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"\n';
const commitSecret = (path: string): Step[] => [
  { do: 'write', path, content: SECRET_FILE },
  { do: 'commit', message: 'Add settings' },
];
const sh = (cmd: string): Step => ({ do: 'sh', cmd });

describe.skipIf(!docker.ok)('red team: the secret scan across the wall', () => {
  const rt = new RedTeam();
  beforeAll(() => rt.start());
  afterAll(() => rt.stop());

  const marker = (name: string) => join(rt.hostDir, name);
  const evilScript = (name: string) =>
    sh(
      `printf '#!/bin/sh\\necho pwned > ${marker(name)}\\ncat > /dev/null\\necho "[GNUPG:] SIG_CREATED D 1 8 00 1 X" >&2\\nprintf -- "-----BEGIN PGP SIGNATURE-----\\\\n\\\\nAAAA\\\\n-----END PGP SIGNATURE-----\\\\n"\\n' > evil.sh && chmod +x evil.sh`,
    );

  /** A turn that writes evil.sh (it leaves `name` on the host if it ever runs there), takes `steps` and pushes; the host records it. */
  const runsNothingOnHost = async (name: string, steps: Step[]) => {
    const run = await rt.launch([[evilScript(name), ...steps, { do: 'push' }]]);
    await rt.record(run);
    expect(existsSync(marker(name))).toBe(false);
  };
  /** A turn that takes `steps` and pushes: the host's scan of it names `file`. */
  const scanFinds = async (file: string, steps: Step[]) => {
    const run = await rt.launch([[...steps, { do: 'push' }]]);
    const { record } = await rt.record(run);
    expect(record.secretScan.findings.map((f) => f.file)).toContain(file);
  };
  const signedCommit = [
    { do: 'write', path: 'a.txt', content: 'a\n' },
    sh('git add -A && git -c gpg.program=./evil.sh -c user.signingkey=x commit -qS -m signed'),
  ] as Step[];

  it('diff.external in the repository config runs nothing on the host', () =>
    runsNothingOnHost('EXTERNAL_RAN', [
      { do: 'write', path: 'a.txt', content: 'a\n' },
      { do: 'commit', message: 'A' },
      sh('git config diff.external ./evil.sh'),
    ]));

  // The signing itself runs evil.sh in the bottle; only the host's copy matters.
  it('log.showSignature with gpg.program runs nothing on the host', () =>
    runsNothingOnHost('GPG_RAN', [
      ...signedCommit,
      sh('git config log.showSignature true && git config gpg.program ./evil.sh'),
    ]));

  it('an included config file cannot switch on signature checks that run a program', () =>
    runsNothingOnHost('INCLUDED_GPG_RAN', [
      ...signedCommit,
      sh(
        `printf '[log]\\n\\tshowSignature = true\\n[gpg]\\n\\tprogram = ./evil.sh\\n' > .git/extra.cfg && git config include.path extra.cfg`,
      ),
    ]));

  it('a diff driver in .gitattributes does not hide a secret from the scan', () =>
    scanFinds('prod.env', [
      sh(`printf '*.env diff=plain\\n' > .gitattributes && git config diff.plain.textconv cat`),
      ...commitSecret('prod.env'),
    ]));

  it('a -diff attribute does not hide a secret from the scan', () =>
    scanFinds('prod.env', [
      sh(`printf 'prod.env -diff\\n' > .gitattributes`),
      ...commitSecret('prod.env'),
    ]));

  it('a NUL byte does not hide a secret from the scan', () =>
    scanFinds('prod.env', [
      sh(`printf '\\000\\n${SECRET_FILE.replaceAll('\n', '\\n')}' > prod.env`),
      { do: 'commit', message: 'Add settings' },
    ]));

  it('a replace ref does not swap a secret commit for a clean one in the scan', () =>
    scanFinds('prod.env', [
      ...commitSecret('prod.env'),
      sh(
        'clean=$(git commit-tree HEAD~1^{tree} -p HEAD~1 -m "Add settings") && git replace HEAD "$clean"',
      ),
    ]));

  it('a secret a merge adds itself (in neither parent) is not hidden by the merge', () =>
    scanFinds('prod.env', [
      sh(
        `git checkout -q -b side && echo s > side.txt && git add side.txt && git commit -qm side && git checkout -q - && echo m > main.txt && git add main.txt && git commit -qm main && git merge -q --no-commit side; printf '${SECRET_FILE.replaceAll('\n', '\\n')}' > prod.env && git add -A && git commit -qm merge`,
      ),
    ]));

  it('a merge that drops a side branch (merge -s ours) does not hide the branch', () =>
    scanFinds('creds.env', [
      sh('git checkout -q -b side'),
      ...commitSecret('creds.env'),
      sh('git checkout -q - && git merge -q -s ours -m merged side'),
    ]));

  it('a secret in a commit message is scanned', async () => {
    const run = await rt.launch([
      [
        sh(
          `git commit -q --allow-empty -m "deploy with AWS_KEY = AKIAIOSFODNN7EXAMPLX and aws_secret = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"`,
        ),
        { do: 'push' },
      ],
    ]);
    const { record } = await rt.record(run);
    expect(record.secretScan.findings.length).toBeGreaterThan(0);
  });

  it('an inline gitleaks:allow marker does not switch the scan off', () =>
    scanFinds('prod.env', [
      sh(
        `printf 'AWS_KEY = "AKIAIOSFODNN7EXAMPLX" # gitleaks:allow\\naws_secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY" # gitleaks:allow\\n' > prod.env && git add -A && git commit -qm settings`,
      ),
    ]));

  it('moving HEAD away after pushing does not hide the pushed secret', async () => {
    const run = await rt.launch([
      [...commitSecret('prod.env'), { do: 'push' }, sh('git reset -q --hard HEAD~1')],
    ]);
    const { record } = await rt.record(run);
    expect(record.secretScan.findings.map((f) => f.file)).toContain('prod.env');
  });
});

describe.skipIf(!docker.ok)('red team: object files the agent forges', () => {
  const rt = new RedTeam();
  beforeAll(() => rt.start());
  afterAll(() => rt.stop());

  it('an object file that lies about its content cannot be pushed', async () => {
    const before = await rt.refs('acme/widgets');
    const run = await rt.launch([
      [
        ...commitSecret('prod.env'),
        // The secret blob's file now holds a harmless blob's bytes (git does not re-hash on read).
        sh(
          'clean=$(echo harmless | git hash-object -w --stdin); bad=$(git rev-parse HEAD:prod.env); f=.git/objects/$(echo $bad | cut -c1-2)/$(echo $bad | cut -c3-); g=.git/objects/$(echo $clean | cut -c1-2)/$(echo $clean | cut -c3-); chmod u+w $f && cp $g $f',
        ),
        { do: 'call', method: 'push', mayFail: true },
      ],
    ]);
    // The sidecar checks each object it takes: the forged one is refused, nothing is pushed.
    expect(run.steps.at(-1)?.['ok']).toBe(false);
    expect(await rt.refs('acme/widgets')).toEqual(before);
    const { record } = await rt.record(run);
    expect(record.secretScan.findings).toEqual([]);
  });

  it('an object file that lies about its content does not swap a pushed secret for clean text', async () => {
    const run = await rt.launch([
      [
        ...commitSecret('prod.env'),
        { do: 'push' },
        sh(
          'clean=$(echo harmless | git hash-object -w --stdin); bad=$(git rev-parse HEAD:prod.env); f=.git/objects/$(echo $bad | cut -c1-2)/$(echo $bad | cut -c3-); g=.git/objects/$(echo $clean | cut -c1-2)/$(echo $clean | cut -c3-); chmod u+w $f && cp $g $f',
        ),
      ],
    ]);
    const { record } = await rt.record(run);
    expect(record.secretScan.findings.map((f) => f.file)).toContain('prod.env');
  });

  it('a HEAD naming a commit the workspace lacks is not counted as scanned, and the commit is scanned when pushed', async () => {
    const run = await rt.launch([
      [
        // A secret commit kept in the home, its id written into HEAD, its objects not in the workspace.
        sh(
          `git init -q "$HOME/stash" && cd "$HOME/stash" && git config user.name M && git config user.email m@x && printf '${SECRET_FILE.replaceAll('\n', '\\n')}' > prod.env && git add . && git commit -qm stash && git rev-parse HEAD > "$HOME/stash.sha" && cd /workspace && cp "$HOME/stash.sha" .git/HEAD`,
        ),
        { do: 'call', method: 'push', mayFail: true },
      ],
      [
        sh('git fetch -q "$HOME/stash" HEAD && git checkout -q -f "$(cat "$HOME/stash.sha")"'),
        { do: 'push' },
      ],
    ]);
    await rt.record(run);
    const second = await rt.record(await rt.resume(run));
    expect(second.record.secretScan.findings.map((f) => f.file)).toContain('prod.env');
  });
});

describe.skipIf(!docker.ok)('red team: the scan covers the run, not the history before it', () => {
  const rt = new RedTeam();
  beforeAll(() => rt.start({ 'legacy.env': SECRET_FILE }));
  afterAll(() => rt.stop());

  it('a secret already in the repository is not blamed on a clean run', async () => {
    const run = await rt.launch([
      [
        { do: 'write', path: 'fix.txt', content: 'fixed\n' },
        { do: 'commit', message: 'Fix' },
        { do: 'push' },
      ],
    ]);
    const { record } = await rt.record(run);
    expect(record.secretScan.error).toBeUndefined();
    expect(record.secretScan.findings).toEqual([]);
  });
});
