import { type KeyObject, sign, verify } from 'node:crypto';
import { canonicalJson, sha256Hex } from './canonical';
import { type KeyRing, keyIdOf, type SigningKey } from './keys';
import { GENESIS_HASH, type RunRecord, RunRecordSchema, type SignedRecord } from './record';

export function signRecord(record: RunRecord, key: SigningKey): SignedRecord {
  const text = canonicalJson(RunRecordSchema.parse(record));
  return {
    record,
    hash: sha256Hex(text),
    signature: sign(null, Buffer.from(text), key.privateKey).toString('base64'),
    keyId: key.keyId,
  };
}

export interface Verification {
  ok: boolean;
  problems: string[];
  /** The key(s) the record (or chain) was signed with, among those trusted. */
  keyIds?: string[];
}

/**
 * Check one signed record: its schema, hash, signature and key. Says exactly
 * what is wrong. `keys` is one public key, or the fleet's ring of trusted keys
 * (`keyRing`): then the record's own key id picks the key, and a key the ring
 * does not hold is refused.
 */
export function verifyRecord(signed: SignedRecord, keys: KeyObject | KeyRing): Verification {
  const problems: string[] = [];
  let publicKey: KeyObject | undefined;
  if (keys instanceof Map) {
    publicKey = keys.get(signed.keyId);
    if (!publicKey)
      return {
        ok: false,
        problems: [
          `signed with key ${signed.keyId}, which is not one this fleet trusts (${[...keys.keys()].join(', ') || 'none'})`,
        ],
      };
  } else publicKey = keys as KeyObject;
  const parsed = RunRecordSchema.safeParse(signed.record);
  if (!parsed.success)
    problems.push(
      `the record does not match the schema: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
    );
  let text: string;
  try {
    text = canonicalJson(signed.record);
  } catch (err) {
    return {
      ok: false,
      problems: [...problems, `the record cannot be canonicalised: ${(err as Error).message}`],
    };
  }
  if (sha256Hex(text) !== signed.hash)
    problems.push('the record was changed: its hash does not match');
  if (keyIdOf(publicKey) !== signed.keyId)
    problems.push(`signed with key ${signed.keyId}, not with the given key ${keyIdOf(publicKey)}`);
  let sigOk = false;
  try {
    sigOk = verify(null, Buffer.from(text), publicKey, Buffer.from(signed.signature, 'base64'));
  } catch {
    sigOk = false;
  }
  if (!sigOk) problems.push('the signature does not verify');
  const keyIds = [signed.keyId];
  // A record that says its op log was tampered with is evidence, not a clean run.
  if (signed.record.opLog && signed.record.opLog.verified === false)
    problems.push(
      `its op log was found tampered with when it was recorded: ${signed.record.opLog.problems.map((p) => `line ${p.line}: ${p.problem}`).join('; ') || 'no detail'}`,
    );
  return { ok: problems.length === 0, problems, keyIds };
}

/** Check one bottle's records in order: each verifies and names the previous one's hash. */
export function verifyChain(records: SignedRecord[], keys: KeyObject | KeyRing): Verification {
  const problems: string[] = [];
  const keyIds = new Set<string>();
  let prev = GENESIS_HASH;
  records.forEach((r, i) => {
    const one = verifyRecord(r, keys);
    if (one.ok) keyIds.add(r.keyId);
    for (const p of one.problems) problems.push(`record ${i + 1} (${r.record.id}): ${p}`);
    if (r.record.prev !== prev) {
      problems.push(
        `record ${i + 1} (${r.record.id}) does not follow the record before it: a record was removed, inserted or reordered`,
      );
    }
    prev = r.hash;
    // Each turn's op log must still hold every line an earlier record saw.
    const earlier = records[i - 1]?.record.opLog;
    if (earlier && r.record.opLog) {
      const upTo = earlier.head?.seq ?? earlier.entries.length;
      const before = earlier.entries.slice(0, upTo).map(canonicalJson);
      const now = r.record.opLog.entries.slice(0, upTo).map(canonicalJson);
      if (now.length < before.length || before.some((line, k) => line !== now[k]))
        problems.push(
          `record ${i + 1} (${r.record.id}): its op log no longer holds the lines record ${i} saw: an earlier turn's line was changed or removed`,
        );
    }
  });
  const slugs = new Set(records.map((r) => r.record.slug));
  if (slugs.size > 1) problems.push(`the chain mixes bottles: ${[...slugs].join(', ')}`);
  return { ok: problems.length === 0, problems, keyIds: [...keyIds] };
}
