import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
} from 'node:crypto';
import {
  accessSync,
  chmodSync,
  constants,
  existsSync,
  linkSync,
  mkdirSync,
  readFileSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { BbError } from '@bb/errors';
import { homeLayout } from '@bb/names';

export interface SigningKey {
  privateKey: KeyObject;
  publicKey: KeyObject;
  /** The first 16 hex digits of sha256 over the public key (SPKI DER). */
  keyId: string;
  /** The public key as PEM, to give to verifiers. */
  publicPem: string;
}

export function keyIdOf(publicKey: KeyObject): string {
  return createHash('sha256')
    .update(publicKey.export({ type: 'spki', format: 'der' }))
    .digest('hex')
    .slice(0, 16);
}

/**
 * The provenance signing key at `<bbHome>/keys/provenance-ed25519.pem`, created
 * (0600, in a 0700 directory) on first use. A key file readable by others is
 * refused.
 */
export function loadOrCreateSigningKey(bbHome: string): SigningKey {
  const dir = homeLayout({}, bbHome).keys;
  const file = join(dir, 'provenance-ed25519.pem');
  // Given, read-only (a Kubernetes Secret mounted at $BB_HOME/keys): used as it is.
  const given = existsSync(file) && readOnly(dir);
  if (!given) mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (!existsSync(file)) {
    // Written whole under another name, then linked into place: orchestrators starting
    // together on one BB_HOME agree on one key, and none reads half a file.
    const { privateKey } = generateKeyPairSync('ed25519');
    const tmp = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
    writeFileSync(tmp, privateKey.export({ type: 'pkcs8', format: 'pem' }), {
      mode: 0o600,
      flag: 'wx',
    });
    try {
      linkSync(tmp, file);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'EEXIST') {
        // A filesystem without hard links: created in place, once; a reader that
        // comes while it is written waits for it below.
        try {
          writeFileSync(file, readFileSync(tmp), { mode: 0o600, flag: 'wx' });
        } catch (again) {
          if ((again as NodeJS.ErrnoException).code !== 'EEXIST') throw again;
        }
      }
    } finally {
      unlinkSync(tmp);
    }
  }
  const mode = statSync(file).mode & 0o777;
  if (mode & 0o077) {
    throw new BbError(
      'INVALID_INPUT',
      `${file} is readable by others (mode ${mode.toString(8)}): run chmod 600 ${file}`,
    );
  }
  if (!given) chmodSync(dir, 0o700);
  let privateKey: KeyObject | undefined;
  for (let i = 0; ; i++) {
    try {
      privateKey = createPrivateKey(readFileSync(file));
      break;
    } catch (err) {
      // Another process may be writing it this instant (no hard links): a moment's wait.
      if (i >= 20)
        throw new BbError(
          'STATE_CORRUPT',
          `${file} is not a private key: ${(err as Error).message}`,
        );
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    }
  }
  if (privateKey.asymmetricKeyType !== 'ed25519')
    throw new BbError('STATE_CORRUPT', `${file} is not an ed25519 key`);
  const publicKey = createPublicKey(privateKey);
  return {
    privateKey,
    publicKey,
    keyId: keyIdOf(publicKey),
    publicPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
  };
}

/** Whether `dir` is on a read-only mount (it cannot be made private, nor written). */
function readOnly(dir: string): boolean {
  try {
    accessSync(dir, constants.W_OK);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EROFS';
  }
}

/** A public key the fleet trusts to sign run records: each orchestrator adds its own. */
export interface TrustedKey {
  keyId: string;
  /** SPKI PEM. */
  publicKey: string;
  /** Who added it (an orchestrator's replica name). */
  by: string;
  addedAt: string;
}

/** The keys records may be signed with, by id. */
export type KeyRing = ReadonlyMap<string, KeyObject>;

/**
 * The ring of `trusted` keys: each key's id is checked against its PEM (an entry
 * whose id is not its key's is a `STATE_CORRUPT` store, never trusted quietly).
 */
export function keyRing(trusted: readonly Pick<TrustedKey, 'keyId' | 'publicKey'>[]): KeyRing {
  const ring = new Map<string, KeyObject>();
  for (const t of trusted) {
    let key: KeyObject;
    try {
      key = createPublicKey(t.publicKey);
    } catch (err) {
      throw new BbError(
        'STATE_CORRUPT',
        `trusted key ${t.keyId} is not a public key: ${(err as Error).message}`,
      );
    }
    if (keyIdOf(key) !== t.keyId)
      throw new BbError(
        'STATE_CORRUPT',
        `trusted key ${t.keyId} is stored with another key (its id is ${keyIdOf(key)})`,
      );
    ring.set(t.keyId, key);
  }
  return ring;
}

/** `key` as the entry that makes the fleet trust it, added by `by`. */
export function trustedKeyOf(key: Pick<SigningKey, 'keyId' | 'publicPem'>, by: string): TrustedKey {
  return { keyId: key.keyId, publicKey: key.publicPem, by, addedAt: new Date().toISOString() };
}

/** Checks a key to be trusted: its id is its key's, its holder a short plain name. */
export function checkTrustedKey(k: TrustedKey): TrustedKey {
  keyRing([k]);
  if (!/^[\w.:@/-]{1,200}$/.test(k.by))
    throw new BbError(
      'INVALID_INPUT',
      `trusted key ${k.keyId}: by ${JSON.stringify(k.by)} is not a plain name`,
    );
  if (Number.isNaN(Date.parse(k.addedAt)))
    throw new BbError(
      'INVALID_INPUT',
      `trusted key ${k.keyId}: addedAt ${JSON.stringify(k.addedAt)} is not a time`,
    );
  return k;
}
