import { describe, expect, it } from 'vitest';
import {
  BbError,
  errorMessage,
  isBbError,
  redact,
  redactString,
  registerSecret,
  registerUrlSecrets,
  settledCode,
} from './index';

describe('BbError', () => {
  it('is recognised by name and code, not by class identity', () => {
    const err = new BbError('NOT_FOUND', 'issue #9 not found', { data: { number: 9 } });
    expect(isBbError(err)).toBe(true);
    expect(isBbError(err, 'NOT_FOUND')).toBe(true);
    expect(isBbError(err, 'SCOPE_DENIED')).toBe(false);
    // A structurally identical error from another bundled copy still matches.
    const foreign = Object.assign(new Error('x'), { name: 'BbError', code: 'NOT_FOUND' });
    expect(isBbError(foreign, 'NOT_FOUND')).toBe(true);
    expect(isBbError(new Error('x'))).toBe(false);
    expect(isBbError(null)).toBe(false);
  });

  it('keeps the cause and serialises code, message and data', () => {
    const cause = new Error('socket hang up');
    const err = new BbError('FORGE_UNAVAILABLE', 'forge did not answer', {
      cause,
      data: { tries: 3 },
    });
    expect(err.cause).toBe(cause);
    expect(JSON.parse(JSON.stringify(err))).toEqual({
      name: 'BbError',
      code: 'FORGE_UNAVAILABLE',
      message: 'forge did not answer',
      data: { tries: 3 },
    });
  });
});

describe('settledCode', () => {
  it('says how a promise settles: resolved, its BbError code, or what else was thrown', async () => {
    expect(await settledCode(Promise.resolve(1))).toBe('resolved');
    expect(await settledCode(Promise.reject(new BbError('CONFLICT', 'taken')))).toBe('CONFLICT');
    expect(await settledCode(Promise.reject(new Error('boom')))).toBe('not a BbError: Error: boom');
  });
});

describe('redaction', () => {
  it('removes registered secrets from messages', () => {
    registerSecret('s3cr3t-token-value-123');
    const err = new BbError('FORGE_ERROR', 'request with s3cr3t-token-value-123 failed');
    expect(err.message).not.toContain('s3cr3t-token-value-123');
    expect(errorMessage(new Error('x s3cr3t-token-value-123 y'))).toBe('x [REDACTED] y');
  });

  it('removes credential-shaped text nobody registered', () => {
    expect(redactString('Authorization: token abcdef0123456789')).not.toContain('abcdef0123456789');
    expect(redactString('GET /api?token=abcdef0123&x=1')).toBe('GET /api?token=[REDACTED]&x=1');
    expect(redactString('clone http://bot:hunter2hunter2@gitea.test/a/b')).toBe(
      'clone http://[REDACTED]@gitea.test/a/b',
    );
    expect(redactString('open postgres://bb:s3cret-pass@db:5432/bb failed')).toBe(
      'open postgres://[REDACTED]@db:5432/bb failed',
    );
    // GitHub's tokens and an App's JWT, wherever they appear.
    for (const t of [
      'ghs_16C7e42F292c6912E7710c838347Ae178B4a',
      'ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789',
      'github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz',
      'eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOjEyfQ.c2lnbmF0dXJlLXBhcnQ',
    ])
      expect(redactString(`the token was ${t}, then`)).toBe('the token was [REDACTED], then');
    expect(redactString('ghs_short and ghost_busters')).toBe('ghs_short and ghost_busters');
  });

  it('registers a connection URL, its password and password parameters as secrets', () => {
    registerUrlSecrets('postgres://bb:pa%24%24word-one@db/bb?sslpassword=ssl-secret-two');
    const line = redactString('pa$$word-one and ssl-secret-two');
    expect(line).not.toContain('pa$$word-one');
    expect(line).not.toContain('ssl-secret-two');
    expect(() => registerUrlSecrets('not a url at all')).not.toThrow();
  });

  it('redacts credential headers and secret-named fields in objects', () => {
    const out = redact({
      headers: { Authorization: 'token abc', 'content-type': 'application/json' },
      forgeToken: 'zzz',
      nested: [{ 'X-Api-Key': 'k' }],
    });
    expect(out).toEqual({
      headers: { Authorization: '[REDACTED]', 'content-type': 'application/json' },
      forgeToken: '[REDACTED]',
      nested: [{ 'X-Api-Key': '[REDACTED]' }],
    });
  });
});
