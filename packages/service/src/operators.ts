// Operators' tokens live with the rest of the state (`@bb/state`: this machine's SQLite;
// `@bb/state-postgres`: the fleet's PostgreSQL). Kept here under the names the service
// has always exported them by.
export {
  OPERATOR_NAME,
  OPERATOR_TOKEN,
  type OperatorInfo,
  type OperatorTokenStore,
  SqliteOperatorTokens as OperatorTokens,
} from '@bb/state';
