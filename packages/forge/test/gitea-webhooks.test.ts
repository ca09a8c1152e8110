import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isBbError } from '@bb/errors';
import { describe, expect, it } from 'vitest';
import { parseGiteaWebhook, verifyGiteaWebhook } from '../src/index';
import { EXPECTED, INDEX, loadFixture, WEBHOOK_SECRET } from './support/fixtures';
import { checkDefinition, GITEA_FIXTURES } from './support/swagger';

describe("Gitea's webhook fixtures", () => {
  it('are all covered, and the vendored copies match ../shared/gitea when it is there', () => {
    expect(INDEX.fixtures.map((f) => f.name).sort()).toEqual(Object.keys(EXPECTED).sort());
    for (const f of INDEX.fixtures) {
      const { body } = loadFixture(f);
      expect(createHash('sha256').update(body).digest('hex'), f.name).toBe(f.body_sha256);
    }
    const shared = join(GITEA_FIXTURES, '..', '..', '..', '..', '..', '..', 'shared', 'gitea');
    if (existsSync(shared)) {
      for (const dir of ['webhooks', 'api-examples']) {
        for (const file of readdirSync(join(shared, dir))) {
          expect(
            readFileSync(join(GITEA_FIXTURES, dir, file)).equals(
              readFileSync(join(shared, dir, file)),
            ),
            `${dir}/${file}`,
          ).toBe(true);
        }
      }
      expect(
        readFileSync(join(GITEA_FIXTURES, 'swagger.v1.json')).equals(
          readFileSync(join(shared, 'swagger.v1.json')),
        ),
      ).toBe(true);
    }
  });

  for (const entry of INDEX.fixtures) {
    describe(entry.name, () => {
      const { headers, body } = loadFixture(entry);

      it('verifies with the hook secret, and not with another', () => {
        expect(verifyGiteaWebhook(headers, body, WEBHOOK_SECRET)).toBe(true);
        expect(verifyGiteaWebhook(headers, body, 'not-the-secret')).toBe(false);
        expect(verifyGiteaWebhook(headers, body, '')).toBe(false);
      });

      it('fails verification when any single byte changes', () => {
        // Every byte position would be slow to prove for 15 KB bodies; a spread of
        // positions, including both ends, stands for them.
        const step = Math.max(1, Math.floor(body.length / 97));
        for (let at = 0; at < body.length; at += step) {
          const changed = Buffer.from(body);
          changed[at] = changed[at]! ^ 0x20;
          expect(verifyGiteaWebhook(headers, changed, WEBHOOK_SECRET), `byte ${at}`).toBe(false);
        }
        expect(
          verifyGiteaWebhook(headers, Buffer.concat([body, Buffer.from(' ')]), WEBHOOK_SECRET),
        ).toBe(false);
      });

      it('verifies from X-Hub-Signature-256 alone, and from Forgejo headers', () => {
        const hubOnly = Object.fromEntries(
          Object.entries(headers).filter(([k]) => !/signature$/i.test(k) || /256/.test(k)),
        );
        expect(verifyGiteaWebhook(hubOnly, body, WEBHOOK_SECRET)).toBe(true);
        const forgejo: Record<string, string> = {
          'content-type': 'application/json',
          'x-forgejo-event': headers['X-Gitea-Event']!,
          'x-forgejo-event-type': headers['X-Gitea-Event-Type']!,
          'x-forgejo-delivery': headers['X-Gitea-Delivery']!,
          'x-forgejo-signature': headers['X-Gitea-Signature']!,
        };
        expect(verifyGiteaWebhook(forgejo, body, WEBHOOK_SECRET)).toBe(true);
        expect(parseGiteaWebhook(forgejo, body)).toEqual(parseGiteaWebhook(headers, body));
      });

      it(`parses to ${EXPECTED[entry.name]!.kind}`, () => {
        const event = parseGiteaWebhook(headers, body);
        expect(event).toMatchObject(EXPECTED[entry.name]!);
        expect(event.deliveryId).toBe(headers['X-Gitea-Delivery']);
      });
    });
  }

  it('a replay (new delivery UUID) and a second hook level give the same dedupe key', () => {
    for (const entry of INDEX.fixtures) {
      const { headers, body } = loadFixture(entry);
      const a = parseGiteaWebhook(headers, body);
      const replay = parseGiteaWebhook(
        {
          ...headers,
          'X-Gitea-Delivery': 'new-uuid',
          'X-Gitea-Hook-Installation-Target-Type': 'organization',
        },
        body,
      );
      if (a.kind === 'ignored') continue;
      expect(replay.kind === 'ignored' ? '' : replay.key).toBe(a.key);
    }
  });

  it('different changes get different dedupe keys', () => {
    const keys = INDEX.fixtures
      .map((e) => parseGiteaWebhook(loadFixture(e).headers, loadFixture(e).body))
      .flatMap((e) => (e.kind === 'ignored' ? [] : [e.key]));
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('dispatches on the pair of event headers (pull_request_comment collision)', () => {
    const onPull = INDEX.fixtures.find((f) => f.name === 'issue_comment.created.on_pull')!;
    const review = INDEX.fixtures.find((f) => f.name === 'pull_request_review.comment')!;
    expect(loadFixture(onPull).headers['X-Gitea-Event-Type']).toBe('pull_request_comment');
    expect(loadFixture(review).headers['X-Gitea-Event']).toBe('pull_request_comment');
    expect(parseGiteaWebhook(loadFixture(onPull).headers, loadFixture(onPull).body).kind).toBe(
      'comment_created',
    );
    expect(parseGiteaWebhook(loadFixture(review).headers, loadFixture(review).body).kind).toBe(
      'review_submitted',
    );
  });

  it('refuses form-encoded hooks, a missing event header and malformed JSON with INVALID_INPUT', () => {
    const { headers, body } = loadFixture(INDEX.fixtures[0]!);
    const bad = [
      () =>
        parseGiteaWebhook(
          { ...headers, 'Content-Type': 'application/x-www-form-urlencoded' },
          body,
        ),
      () => parseGiteaWebhook({ 'content-type': 'application/json' }, body),
      () => parseGiteaWebhook(headers, '{"action": '),
      () => parseGiteaWebhook(headers, '[1,2]'),
      () =>
        parseGiteaWebhook(
          headers,
          '{"action":"opened","repository":{"name":"w","owner":{"login":"a"}}}',
        ),
    ];
    for (const fn of bad) {
      let err: unknown;
      try {
        fn();
      } catch (e) {
        err = e;
      }
      expect(isBbError(err, 'INVALID_INPUT'), String(err)).toBe(true);
    }
  });

  it('rejects signatures of the wrong length or with a prefix where none belongs', () => {
    const { headers, body } = loadFixture(INDEX.fixtures[0]!);
    const sig = headers['X-Gitea-Signature']!;
    for (const s of [
      sig.slice(0, 63),
      `${sig}00`,
      `sha256=${sig}`,
      sig.toUpperCase().replace(/[0-9]/g, 'g'),
    ]) {
      expect(verifyGiteaWebhook({ 'x-gitea-signature': s }, body, WEBHOOK_SECRET)).toBe(false);
    }
    expect(
      verifyGiteaWebhook({ 'x-gitea-signature': sig.toUpperCase() }, body, WEBHOOK_SECRET),
    ).toBe(true);
  });

  it("the fixtures' objects satisfy the swagger definitions as our checker reads them", () => {
    const assigned = JSON.parse(
      loadFixture(INDEX.fixtures.find((f) => f.name === 'issues.assigned')!).body.toString(),
    );
    expect(checkDefinition('Issue', assigned.issue)).toEqual([]);
    expect(checkDefinition('Repository', assigned.repository)).toEqual([]);
    expect(checkDefinition('User', assigned.sender)).toEqual([]);
    const pr = JSON.parse(
      loadFixture(INDEX.fixtures.find((f) => f.name === 'pull_request.opened')!).body.toString(),
    );
    expect(checkDefinition('PullRequest', pr.pull_request)).toEqual([]);
    // and the checker does reject a wrong shape
    expect(checkDefinition('Issue', { ...assigned.issue, number: 'seventeen' })).not.toEqual([]);
    expect(checkDefinition('Issue', { ...assigned.issue, surprise: 1 })).not.toEqual([]);
  });
});
