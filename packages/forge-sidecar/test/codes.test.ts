import { BB_ERROR_CODES, BbError, isBbError } from '@bb/errors';
import { describe, expect, it } from 'vitest';
import { ERROR_TABLE, fromWireError, toWireError } from '../src/codes';

describe('error codes on the wire', () => {
  it('each code of the wire table is a BbError code, and comes back as itself', () => {
    for (const code of Object.keys(ERROR_TABLE) as Array<keyof typeof ERROR_TABLE>) {
      expect(BB_ERROR_CODES[code]).toBeTruthy();
      if (code === 'INTERNAL') continue;
      const back = fromWireError(toWireError(new BbError(code, 'why')).wire);
      expect(isBbError(back, code)).toBe(true);
      expect(back.message).toBe('why');
    }
  });

  it('a code the client does not know is read by its number, never taken as a new code', () => {
    const back = fromWireError({
      code: -32002,
      message: 'gone',
      data: { code: 'SOMETHING_NEW', kind: 'x' },
    });
    expect(back.code).toBe('NOT_FOUND');
    const unknown = fromWireError({
      code: -31999,
      message: '?',
      data: { code: '__proto__', kind: 'x' },
    });
    expect(unknown.code).toBe('INTERNAL');
  });
});
