import { createPublicKey, type KeyObject } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { BbError } from '@bb/errors';
import {
  type KeyRing,
  keyRing,
  renderMarkdown,
  renderTerminal,
  renderVerification,
  type SignedRecord,
  verifyChain,
  verifyRecord,
} from '@bb/provenance';
import { jsonText } from '@bb/wall';
import { type CliState, openState } from '../deps';
import { type CliIo, green, parse, red, UsageError } from '../io';
import { PROVENANCE_USAGE } from '../usage';

async function lookup(state: CliState, what: string): Promise<SignedRecord[]> {
  const one = await state.provenance.get(what);
  if (one) return [one];
  const chain = await state.provenance.chain(what);
  if (chain.length > 0) return chain;
  throw new BbError(
    'NOT_FOUND',
    `no run record or bottle named ${JSON.stringify(what)} in ${state.home}: see bb orchestrate status, or GET /api/runs`,
  );
}

async function withState<T>(io: CliIo, fn: (state: CliState) => T | Promise<T>): Promise<T> {
  const state = await openState(io);
  try {
    return await fn(state);
  } finally {
    await state.close();
  }
}

function readRecords(file: string, what: string): SignedRecord[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new BbError('INVALID_INPUT', `${what} is not JSON: ${(err as Error).message}`);
  }
  const records = (Array.isArray(parsed) ? parsed : [parsed]) as SignedRecord[];
  if (
    records.length === 0 ||
    records.some((r) => !r || typeof r !== 'object' || !('record' in r) || !('signature' in r))
  )
    throw new BbError(
      'INVALID_INPUT',
      `${what} does not hold signed run records ({ record, hash, signature, keyId })`,
    );
  return records;
}

export async function provenanceCommand(argv: string[], io: CliIo): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === '-h' || sub === '--help') {
    io.stdout(PROVENANCE_USAGE);
    return 0;
  }
  if (sub !== 'show' && sub !== 'verify')
    throw new UsageError(
      sub ? `unknown subcommand ${JSON.stringify(sub)}` : 'name a subcommand: show or verify',
      PROVENANCE_USAGE,
    );
  const { values, positionals } = parse(
    rest,
    sub === 'show'
      ? { json: { type: 'boolean' }, md: { type: 'boolean' } }
      : { key: { type: 'string' } },
    PROVENANCE_USAGE,
    { positionals: 1 },
  );
  const [what] = positionals;
  if (!what) throw new UsageError(`name the run or bottle to ${sub}`, PROVENANCE_USAGE);
  if (values['json'] && values['md'])
    throw new UsageError('choose one of --json and --md', PROVENANCE_USAGE);

  if (sub === 'show') {
    const records = await withState(io, (st) => lookup(st, what));
    if (values['json']) io.stdout(`${jsonText(records.length === 1 ? records[0] : records, 2)}\n`);
    else io.stdout(records.map(values['md'] ? renderMarkdown : renderTerminal).join('\n'));
    return 0;
  }

  // verify
  const file = resolve(io.cwd, what);
  const records = existsSync(file)
    ? readRecords(file, what)
    : await withState(io, (st) => lookup(st, what));
  let key: KeyObject | KeyRing;
  if (typeof values['key'] === 'string') {
    try {
      key = createPublicKey(readFileSync(resolve(io.cwd, values['key']), 'utf8'));
    } catch (err) {
      throw new BbError(
        'INVALID_INPUT',
        `--key ${values['key']}: not a public key PEM (${(err as Error).message})`,
      );
    }
  } else {
    // Every key the fleet trusts, and this BB_HOME's own.
    key = await withState(io, async (st) => {
      const own = st.key();
      return new Map([...keyRing(await st.provenance.trustedKeys()), [own.keyId, own.publicKey]]);
    });
  }
  const v = records.length === 1 ? verifyRecord(records[0]!, key) : verifyChain(records, key);
  const label =
    records.length === 1
      ? `run ${records[0]!.record.id}`
      : `${records.length} records of ${records[0]!.record.slug}`;
  const text = renderVerification(v, label);
  io.stdout(
    v.ok
      ? text.replace(': OK', `: ${green(io, 'OK')}`)
      : text.replace(': FAILED', `: ${red(io, 'FAILED')}`),
  );
  return v.ok ? 0 : 1;
}
