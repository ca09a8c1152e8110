import { execFile, execFileSync } from 'node:child_process';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OpLog } from '@bb/forge-sidecar';
import { BbDatabase } from '@bb/state';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildRunRecord,
  canonicalJson,
  createProvenanceHandler,
  GENESIS_HASH,
  GitleaksScanner,
  loadOrCreateSigningKey,
  ProvenanceStore,
  type RunRecord,
  renderMarkdown,
  renderTerminal,
  type SignedRecord,
  signRecord,
  trustedKeyOf,
  verifyChain,
  verifyRecord,
} from '../src/index';

const root = mkdtempSync(join(tmpdir(), 'bb-prov-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const AWS_SECRET = 'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY';

function git(cwd: string, ...args: string[]) {
  return execFileSync('git', ['-c', 'user.name=A', '-c', 'user.email=a@example.test', ...args], {
    cwd,
  })
    .toString()
    .trim();
}

/** A bottle state dir: an op log, a workspace with a base commit and a run commit that leaks a key. */
function stateDir(name: string, opts: { egress?: boolean } = {}) {
  const dir = join(root, name);
  mkdirSync(join(dir, 'state'), { recursive: true });
  mkdirSync(join(dir, 'workspace'));
  git(join(dir, 'workspace'), 'init', '-q');
  writeFileSync(join(dir, 'workspace', 'README.md'), '# w\n');
  git(join(dir, 'workspace'), 'add', '.');
  git(join(dir, 'workspace'), 'commit', '-qm', 'base');
  const base = git(join(dir, 'workspace'), 'rev-parse', 'HEAD');
  writeFileSync(
    join(dir, 'workspace', 'config.py'),
    `# settings\nREGION = "eu"\nAWS_KEY = "AKIAIOSFODNN7EXAMPLX"\naws_secret = "${AWS_SECRET}"\n`,
  );
  git(join(dir, 'workspace'), 'add', '.');
  git(join(dir, 'workspace'), 'commit', '-qm', 'oops');
  const tip = git(join(dir, 'workspace'), 'rev-parse', 'HEAD');
  // What the sidecar would hold after the push: the commit, in a repository of ours.
  git(dir, 'clone', '-q', '--bare', join(dir, 'workspace'), join(dir, 'state', 'push.git'));
  const log = new OpLog(join(dir, 'state', 'ops.jsonl'));
  log.append({ method: 'read_issue', target: '#17', outcome: 'ok', summary: 'read issue #17' });
  log.append({
    method: 'post_comment',
    target: '#17',
    outcome: 'ok',
    summary: 'posted comment to #17 (10 chars)',
  });
  log.append({
    method: 'post_comment',
    target: '#3',
    outcome: 'rejected',
    reason: 'scope',
    summary: 'refused post comment on #3',
  });
  if (opts.egress) {
    writeFileSync(
      join(dir, 'state', 'egress.jsonl'),
      `${JSON.stringify({ time: 't', kind: 'egress', host: 'registry.npmjs.org', port: 443, decision: 'allowed', rule: 'registry.npmjs.org:443', bytesUp: 1, bytesDown: 2, durationMs: 3 })}\n`,
    );
  }
  return { dir, base, tip, head: log.head };
}

const input = (dir: string, base: string, prev = GENESIS_HASH) => ({
  scan: {
    tips: [git(join(dir, 'workspace'), 'rev-parse', 'HEAD')],
    objectDirs: [join(dir, 'state', 'push.git', 'objects')],
    exclude: [base],
  },
  stateDir: dir,
  slug: 'implementer-abcde',
  agent: 'implementer',
  provider: 'script',
  bottles: ['default'],
  forge: { owner: 'acme', repo: 'widgets', issue: 17, prs: [18] },
  turn: 1,
  startedAt: '2026-11-22T05:00:00.000Z',
  finishedAt: '2026-11-22T05:01:30.000Z',
  exitCode: 0,
  done: { status: 'success' as const, summary: 'Opened the PR.' },
  watchdogFired: null,
  prev,
  scanner: new GitleaksScanner(),
  bbVersion: '0.0.0',
  gitCommit: null,
});

describe('canonical JSON', () => {
  it('sorts keys, drops undefined, keeps numbers as ECMAScript writes them, refuses non-finite', () => {
    expect(canonicalJson({ b: 1, a: [true, null, { d: 'x', c: 1e21 }], u: undefined })).toBe(
      '{"a":[true,null,{"c":1e+21,"d":"x"}],"b":1}',
    );
    expect(canonicalJson({ z: 1, a: 2 })).toBe(canonicalJson({ a: 2, z: 1 }));
    expect(() => canonicalJson({ n: Number.NaN })).toThrow(/no form for NaN/);
  });
});

describe('signing keys', () => {
  it('are created 0600 in a 0700 directory, reused, and refused when others can read them', () => {
    const home = join(root, 'keyhome');
    const a = loadOrCreateSigningKey(home);
    expect(statSync(join(home, 'keys', 'provenance-ed25519.pem')).mode & 0o777).toBe(0o600);
    expect(statSync(join(home, 'keys')).mode & 0o777).toBe(0o700);
    expect(loadOrCreateSigningKey(home).keyId).toBe(a.keyId);
    expect(a.publicPem).toMatch(/BEGIN PUBLIC KEY/);
    chmodSync(join(home, 'keys', 'provenance-ed25519.pem'), 0o644);
    expect(() => loadOrCreateSigningKey(home)).toThrow(/readable by others.*chmod 600/);
    chmodSync(join(home, 'keys', 'provenance-ed25519.pem'), 0o600);
  });

  it.skipIf(process.getuid?.() !== 0)(
    'given on a read-only mount (a Kubernetes Secret), used as it is, never replaced',
    () => {
      // The operator's key, 0400, in a folder mounted read-only at $BB_HOME/keys.
      const made = join(root, 'made-key');
      const key = loadOrCreateSigningKey(made);
      const home = join(root, 'secret-home');
      const keys = join(home, 'keys');
      mkdirSync(keys, { recursive: true });
      writeFileSync(
        join(keys, 'provenance-ed25519.pem'),
        readFileSync(join(made, 'keys', 'provenance-ed25519.pem')),
        {
          mode: 0o400,
        },
      );
      execFileSync('mount', ['--bind', keys, keys]);
      try {
        execFileSync('mount', ['-o', 'remount,bind,ro', keys]);
        expect(loadOrCreateSigningKey(home).keyId).toBe(key.keyId);
      } finally {
        execFileSync('umount', [keys]);
      }
    },
  );

  it('made by several processes at once on one home: all get the same key, none fails', async () => {
    const home = join(root, 'racehome');
    const src = join(import.meta.dirname, '..', 'src', 'keys.ts');
    // Each waits for the same instant, then makes or reads the key.
    const at = Date.now() + 2500;
    const script = `import { loadOrCreateSigningKey } from ${JSON.stringify(src)};
      while (Date.now() < ${at});
      process.stdout.write(loadOrCreateSigningKey(${JSON.stringify(home)}).keyId);`;
    const ids = await Promise.all(
      Array.from(
        { length: 8 },
        () =>
          new Promise<string>((resolve, reject) =>
            execFile(
              process.execPath,
              ['--import', 'tsx', '--input-type=module', '-e', script],
              { cwd: join(import.meta.dirname, '..') },
              (err, out, errOut) => (err ? reject(new Error(errOut || String(err))) : resolve(out)),
            ),
          ),
      ),
    );
    expect(new Set(ids).size).toBe(1);
    expect(loadOrCreateSigningKey(home).keyId).toBe(ids[0]);
  });
});

describe('run records', () => {
  let record: RunRecord;
  let s: ReturnType<typeof stateDir>;
  const key = () => loadOrCreateSigningKey(join(root, 'keyhome'));
  beforeAll(async () => {
    s = stateDir('bottle-1');
    record = await buildRunRecord({ ...input(s.dir, s.base), opLogHead: s.head });
  }, 60_000);

  it('are built from the state dir, with real gitleaks findings that carry no secret', () => {
    expect(record.opLog).toMatchObject({ verified: true, problems: [] });
    expect(record.opLog.entries.map((e) => e['outcome'])).toEqual(['ok', 'ok', 'rejected']);
    expect(record.secretScan.error).toBeUndefined();
    expect(record.secretScan.scanned).toMatch(
      new RegExp(`^git log -p [0-9a-f]{12} --not ${s.base.slice(0, 12)}$`),
    );
    expect(record.secretScan.covered).toHaveLength(1);
    expect(record.secretScan.findings.map((f) => `${f.rule} ${f.file}:${f.line}`)).toContain(
      'aws-access-token config.py:3',
    );
    expect(record.secretScan.findings.every((f) => /^[0-9a-f]{12}$/.test(f.commit))).toBe(true);
    expect(JSON.stringify(record)).not.toContain(AWS_SECRET);
    expect(JSON.stringify(record)).not.toContain('AKIAIOSFODNN7EXAMPLX');
    expect(record).not.toHaveProperty('egress');
    expect(record.durationMs).toBe(90_000);
  });

  it('record a tampered op log loudly, and summarise egress when there is a log', async () => {
    const t = stateDir('bottle-2', { egress: true });
    const file = join(t.dir, 'state', 'ops.jsonl');
    const { readFileSync } = await import('node:fs');
    writeFileSync(file, readFileSync(file, 'utf8').replace('read issue #17', 'read issue #99'));
    const r = await buildRunRecord({ ...input(t.dir, t.base), opLogHead: t.head });
    expect(r.opLog.verified).toBe(false);
    expect(r.opLog.problems[0]!.problem).toMatch(/hash chain broken/);
    expect(renderTerminal(signRecord(r, key()))).toMatch(/TAMPERED: line 2/);
    expect(r.egress).toMatchObject({ allowed: [{ host: 'registry.npmjs.org', connections: 1 }] });
  }, 60_000);

  it("carry the turn's supervise requests and decisions, signed, and show them", async () => {
    const t = stateDir('bottle-sup');
    const supervise = [
      {
        id: 'sr_aaaaaaaaaaaaaaaaaaaa',
        kind: 'allowlist',
        tool: 'pipelock-block',
        createdAt: '2026-11-24T10:00:00.000Z',
        justification: 'pip needs pypi.org',
        candidateHash: 'c'.repeat(64),
        status: 'approved',
        decision: {
          by: 'alice',
          at: '2026-11-24T10:01:00.000Z',
          scope: 'bottle',
          finalHash: 'f'.repeat(64),
          reason: null,
          override: true,
        },
        remediation: {
          ok: true,
          detail: 'reloaded allowlist.json',
          at: '2026-11-24T10:01:00.050Z',
        },
      },
    ];
    const r = await buildRunRecord({ ...input(t.dir, t.base), opLogHead: t.head, supervise });
    expect(r.supervise).toEqual(supervise);
    const signed = signRecord(r, key());
    expect(verifyRecord(signed, key().publicKey).ok).toBe(true);
    // The decision is covered by the signature.
    const tampered = structuredClone(signed);
    tampered.record.supervise![0]!.decision!.by = 'mallory';
    expect(verifyRecord(tampered, key().publicKey).ok).toBe(false);
    expect(renderTerminal(signed)).toMatch(
      /supervise\s+sr_aaaaaaaaaaaaaaaaaaaa allowlist via pipelock-block: approved by alice at 2026-11-24T10:01:00.000Z \(scope bottle\) OVER THE CEILING file ffffffffffff; remediation ok: reloaded allowlist.json/,
    );
    // Literal text in the table (an underscore escaped, so it never starts emphasis).
    expect(renderMarkdown(signed)).toContain('| supervise | sr\\_aaaaaaaaaaaaaaaaaaaa allowlist');
    // A turn that asked for nothing says so, and its record has no field for it.
    const plain = await buildRunRecord({ ...input(t.dir, t.base), opLogHead: t.head });
    expect(plain).not.toHaveProperty('supervise');
    expect(renderTerminal(signRecord(plain, key()))).toMatch(/supervise\s+no requests/);
  });

  it('verify when untouched; any changed byte, a wrong key, a removed or reordered record is detected', async () => {
    const k = key();
    const other = loadOrCreateSigningKey(join(root, 'otherhome'));
    const signed = signRecord(record, k);
    expect(verifyRecord(signed, k.publicKey)).toEqual({
      ok: true,
      problems: [],
      keyIds: [k.keyId],
    });
    // Change one character of the canonical record, anywhere.
    const text = canonicalJson(signed.record);
    for (let at = 0; at < text.length; at += Math.max(1, Math.floor(text.length / 60))) {
      const ch = text[at]!;
      const swap = /[0-9]/.test(ch)
        ? String((Number(ch) + 1) % 10)
        : /[a-z]/.test(ch)
          ? ch === 'a'
            ? 'b'
            : 'a'
          : undefined;
      if (!swap) continue;
      let changed: RunRecord;
      try {
        changed = JSON.parse(text.slice(0, at) + swap + text.slice(at + 1));
      } catch {
        continue;
      }
      expect(verifyRecord({ ...signed, record: changed }, k.publicKey).ok, `char ${at}`).toBe(
        false,
      );
    }
    expect(verifyRecord(signed, other.publicKey).problems.join()).toMatch(
      /not with the given key.*signature does not verify/,
    );
    // A chain of three for one bottle.
    const r2 = signRecord({ ...record, id: 'r2', turn: 2, prev: signed.hash }, k);
    const r3 = signRecord({ ...record, id: 'r3', turn: 3, prev: r2.hash }, k);
    expect(verifyChain([signed, r2, r3], k.publicKey).ok).toBe(true);
    expect(verifyChain([signed, r3], k.publicKey).problems.join()).toMatch(
      /record 2 \(r3\) does not follow/,
    );
    expect(verifyChain([signed, r3, r2], k.publicKey).ok).toBe(false);
  });

  it('are stored per bottle chain, listed with filters and pages, served and rendered', async () => {
    const k = key();
    const db = BbDatabase.open({ path: join(root, 'bb.db') });
    const store = new ProvenanceStore(db);
    const first = signRecord({ ...record, id: 'run-1' }, k);
    store.append(first);
    expect(() => store.append(signRecord({ ...record, id: 'run-x' }, k))).toThrow(/chain ends at/);
    const second = signRecord(
      {
        ...record,
        id: 'run-2',
        turn: 2,
        startedAt: '2026-11-22T06:00:00.000Z',
        prev: store.head(record.slug),
        done: null,
        exitCode: 1,
      },
      k,
    );
    store.append(second);
    store.append(
      signRecord(
        {
          ...record,
          id: 'other-1',
          slug: 'other-xyz',
          agent: 'reviewer',
          forge: { owner: 'acme', repo: 'gadgets', issue: 3, prs: [] },
        },
        k,
      ),
    );
    expect(store.chain(record.slug).map((r) => r.record.id)).toEqual(['run-1', 'run-2']);
    expect(store.list({ repo: 'acme/widgets' }).total).toBe(2);
    expect(store.list({ agent: 'reviewer' }).records.map((r) => r.record.id)).toEqual(['other-1']);
    expect(store.list({ status: 'failed' }).records.map((r) => r.record.id)).toEqual(['run-2']);
    expect(store.list({}, 2, 2).records).toHaveLength(1);

    const handler = createProvenanceHandler({
      store,
      publicKey: k.publicKey,
      publicPem: k.publicPem,
      keyId: k.keyId,
    });
    const get = async (path: string) => {
      const res = (await handler(new Request(`http://x${path}`)))!;
      // biome-ignore lint/suspicious/noExplicitAny: JSON bodies of several shapes, checked field by field below
      return { status: res.status, body: (await res.json()) as any };
    };
    const list = await get('/api/runs?repo=acme/widgets&limit=1');
    expect(list.body).toMatchObject({
      total: 2,
      page: 1,
      limit: 1,
      runs: [{ id: 'run-2', status: 'failed' }],
    });
    expect((await get('/api/runs/run-1')).body.record.id).toBe('run-1');
    expect((await get('/api/runs/run-1/verify')).body).toMatchObject({
      record: { ok: true },
      chain: { ok: true },
    });
    expect((await get('/api/keys')).body.keys[0]).toMatchObject({
      keyId: k.keyId,
      algorithm: 'ed25519',
    });
    expect((await get('/api/runs/nope')).status).toBe(404);
    expect((await get('/api/runs?page=0')).status).toBe(400);
    expect((await get('/api/runs?limit=1000')).status).toBe(400);
    expect(await handler(new Request('http://x/healthz'))).toBeUndefined();
    // A record edited in the database is caught by /verify.
    const row = JSON.parse(
      (
        db.db.prepare("SELECT signed FROM provenance_records WHERE id = 'run-1'").get() as {
          signed: string;
        }
      ).signed,
    ) as SignedRecord;
    row.record.done = { status: 'success', summary: 'rewritten history' };
    db.db
      .prepare("UPDATE provenance_records SET signed = ? WHERE id = 'run-1'")
      .run(JSON.stringify(row));
    const verify = await get('/api/runs/run-1/verify');
    expect(verify.body.record.ok).toBe(false);
    expect(verify.body.record.problems.join()).toMatch(/was changed/);

    const md = renderMarkdown(second);
    expect(md).toMatch(/## Run run-2/);
    expect(md).toMatch(/\| outcome \| failed; exit 1; no done signal \|/);
    expect(renderTerminal(first)).toMatch(/secrets\s+\d+ FOUND: aws-access-token in config.py:3/);
    db.close();
  });

  it('verify against every key the fleet trusts, say which signed, and refuse a key it does not', async () => {
    const db = BbDatabase.open({ path: join(root, 'fleet.db') });
    const store = new ProvenanceStore(db);
    // Two orchestrators, each with a key of its own in its own BB_HOME, one store.
    const a = loadOrCreateSigningKey(join(root, 'home-a'));
    const b = loadOrCreateSigningKey(join(root, 'home-b'));
    const stranger = loadOrCreateSigningKey(join(root, 'home-stranger'));
    store.trustKey(trustedKeyOf(a, 'replica-a'));
    store.trustKey(trustedKeyOf(b, 'replica-b'));
    const t1 = signRecord({ ...record, id: 'fleet-1', slug: 'fleet-xyz' }, a);
    store.append(t1);
    // Turn 2 of the same bottle, resumed by the other orchestrator.
    const t2 = signRecord(
      {
        ...record,
        id: 'fleet-2',
        slug: 'fleet-xyz',
        turn: 2,
        prev: t1.hash,
        startedAt: '2026-11-22T06:00:00.000Z',
      },
      b,
    );
    store.append(t2);
    const handler = createProvenanceHandler({ store, ...pick(a), fleetKeys: true });
    const get = async (path: string) =>
      // biome-ignore lint/suspicious/noExplicitAny: JSON bodies checked field by field below
      (await (await handler(new Request(`http://x${path}`)))!.json()) as any;
    const v = await get('/api/runs/fleet-2/verify');
    expect(v.record).toMatchObject({ ok: true, keyIds: [b.keyId] });
    expect(v.chain).toMatchObject({ ok: true });
    expect([...v.chain.keyIds].sort()).toEqual([a.keyId, b.keyId].sort());
    expect((await get('/api/keys')).keys.map((k: { keyId: string }) => k.keyId)).toEqual([
      a.keyId,
      b.keyId,
    ]);
    // Alone (no fleet keys), a's handler cannot vouch for b's record.
    const alone = createProvenanceHandler({ store, ...pick(a) });
    const lone = (await (await alone(new Request('http://x/api/runs/fleet-2/verify')))!.json()) as {
      record: { ok: boolean; problems: string[] };
    };
    expect(lone.record.ok).toBe(false);
    // A record signed by a key nobody added is refused, by name.
    const t3 = signRecord(
      {
        ...record,
        id: 'fleet-3',
        slug: 'fleet-xyz',
        turn: 3,
        prev: t2.hash,
        startedAt: '2026-11-22T07:00:00.000Z',
      },
      stranger,
    );
    store.append(t3);
    const bad = await get('/api/runs/fleet-3/verify');
    expect(bad.record.ok).toBe(false);
    expect(bad.record.problems.join()).toContain(
      `signed with key ${stranger.keyId}, which is not one this fleet trusts`,
    );
    expect(bad.chain.ok).toBe(false);
    db.close();
  });
});

const pick = (k: ReturnType<typeof loadOrCreateSigningKey>) => ({
  publicKey: k.publicKey,
  publicPem: k.publicPem,
  keyId: k.keyId,
});

describe('the op log as a person reads it', () => {
  it("folds a write's started line into its outcome and shows one that never finished", async () => {
    const { foldOps } = await import('../src/render');
    const folded = foldOps([
      { seq: 1, outcome: 'ok', summary: 'read issue #1' },
      { seq: 2, outcome: 'started', summary: 'post a comment to #1' },
      { seq: 3, outcome: 'ok', summary: 'posted comment to #1', attempt: 2 },
      { seq: 4, outcome: 'started', summary: 'push abc to bb/x' },
    ]);
    expect(folded.map((e) => [e['seq'], e['outcome']])).toEqual([
      [1, 'ok'],
      [3, 'ok'],
      [4, 'no outcome'],
    ]);
    expect(folded[2]!['summary']).toMatch(/never finished/);
  });
});
