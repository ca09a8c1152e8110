/**
 * @module
 * `@bb/supervise/testing`: `describeSuperviseRecords`, the behaviour every store of
 * supervise requests must have (SQLite's `SuperviseStore`, PostgreSQL's
 * `PostgresSuperviseStore`, yours), and `sampleRequest` to make them with.
 */
export { describeSuperviseRecords, sampleRequest } from './records-suite';
