/**
 * @module
 * `@bb/provenance`: the signed record every run leaves behind. Built from a
 * bottle's state (op log, egress log, commits), secret-scanned with gitleaks,
 * canonical JSON, hash-chained per bottle, ed25519-signed, stored in SQLite and
 * served by `(Request) => Response` handlers. Never posted to the forge.
 */
export { type BuildInput, buildRunRecord } from './build';
export { canonicalJson, sha256Hex } from './canonical';
export { createProvenanceHandler, type ProvenanceHandlerOptions } from './http';
export {
  checkTrustedKey,
  type KeyRing,
  keyIdOf,
  keyRing,
  loadOrCreateSigningKey,
  type SigningKey,
  type TrustedKey,
  trustedKeyOf,
} from './keys';
export {
  costOf,
  DEFAULT_PRICES,
  loadPrices,
  type Price,
  PricesFileSchema,
  type PriceTable,
  priceOf,
  type TokenCounts,
} from './prices';
export {
  GENESIS_HASH,
  RECORD_VERSION,
  type RunRecord,
  RunRecordSchema,
  type SignedRecord,
} from './record';
export {
  foldOps,
  renderMarkdown,
  renderSpend,
  renderTerminal,
  renderVerification,
} from './render';
export {
  GitleaksScanner,
  indexPatch,
  locate,
  type ScanRequest,
  type ScanResult,
  type SecretFinding,
  type SecretScanner,
} from './scanner';
export { signRecord, type Verification, verifyChain, verifyRecord } from './sign';
export {
  type Awaitable,
  PROVENANCE_MIGRATIONS,
  ProvenanceStore,
  type RunFilter,
  type RunRecordStore,
  recordStatus,
} from './store';
export {
  egressEntries,
  meteredUsage,
  type SpendLine,
  type SpendRow,
  type SpendSummary,
  sinceOf,
  spendOf,
  spendSince,
  summarizeSpend,
  totalTokens,
  type Usage,
  UsageSchema,
} from './usage';
