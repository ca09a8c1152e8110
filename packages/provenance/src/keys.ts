import {
  createHash,
  createPrivateKey,
  createPublicKey,
  generateKeyPairSync,
  type KeyObject,
  randomBytes,
} from 'node:crypto';
import {
  chmodSync,
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
  mkdirSync(dir, { recursive: true, mode: 0o700 });
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
  chmodSync(dir, 0o700);
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
