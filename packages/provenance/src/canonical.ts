import { createHash } from 'node:crypto';
import { BbError } from '@bb/errors';

/**
 * Canonical JSON in the manner of RFC 8785 (JCS): object keys sorted by UTF-16
 * code units, no whitespace, ECMAScript number serialisation, strings as
 * JSON.stringify writes them. `undefined` members are dropped; non-finite
 * numbers, functions and other non-JSON values are refused.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value === 'boolean' || typeof value === 'string')
    return JSON.stringify(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value))
      throw new BbError('INVALID_INPUT', `canonical JSON has no form for ${value}`);
    return JSON.stringify(value);
  }
  if (Array.isArray(value))
    return `[${value.map((v) => canonicalJson(v === undefined ? null : v)).join(',')}]`;
  if (typeof value === 'object') {
    const obj = value as Record<string, unknown>;
    const keys = Object.keys(obj)
      .filter((k) => obj[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`;
  }
  throw new BbError('INVALID_INPUT', `canonical JSON cannot hold a ${typeof value}`);
}

export function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
