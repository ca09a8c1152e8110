/**
 * @module
 * `@bb/errors`: one error type for every bot-bottle package.
 *
 * A `BbError` carries a stable string `code`, a human message that says what went
 * wrong with which value and what to do, optional typed `data` and a `cause`.
 * Recognise errors with {@link isBbError}, which compares name and code rather
 * than using `instanceof`, so a copy of this package bundled by a third party
 * still matches.
 */
export {
  BB_ERROR_CODES,
  BbError,
  type BbErrorCode,
  type BbErrorOptions,
  errorMessage,
  isBbError,
  settledCode,
} from './bb-error';
export {
  redact,
  redactString,
  registerSecret,
  registerUrlSecrets,
  SECRET_HEADER_NAMES,
} from './redact';
