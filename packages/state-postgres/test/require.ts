import { describe, it } from 'vitest';
import { postgresAvailable } from '../src/testing';

/**
 * Whether a PostgreSQL server can be started here. Missing, the file's tests
 * show as one skipped test naming why; with `BB_REQUIRE_DOCKER=1` (CI) missing
 * is a failure, never a skip.
 */
export function requirePostgres(): boolean {
  if (postgresAvailable()) return true;
  const why = 'PostgreSQL is not installed (run scripts/ensure-postgres.sh)';
  if (process.env['BB_REQUIRE_DOCKER'] === '1')
    describe('PostgreSQL', () => {
      it('is installed (BB_REQUIRE_DOCKER=1)', () => {
        throw new Error(why);
      });
    });
  else describe.skip(`PostgreSQL tests (skipped: ${why})`, () => it('needs PostgreSQL', () => {}));
  return false;
}
