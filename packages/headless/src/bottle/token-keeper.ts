/**
 * Forge tokens that expire (a GitHub App's, an hour each), kept good while a bottle's
 * gate runs. The runner notes when the token it handed a gate expires (`token.renew`,
 * nothing secret, beside the gate's secrets folder, where the gate cannot see it); the
 * keeper looks at the notes every minute and, for a token within `renewBeforeMs` of its
 * end, makes a new one for the bottle's own repository (as its host-written meta names
 * it, never as a note says) and puts it in the gate's secrets folder atomically, where
 * the forge sidecar, which follows that file, takes it up on its next call. The agent
 * never sees either: the folder is mounted into the gate alone. The notes live in the
 * run directory, so an orchestrator that restarts keeps renewing.
 */
import { lstatSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { errorMessage } from '@bb/errors';
import type { SiteCredentials } from '@bb/forge';
import { GATE_USER, readMeta } from './layout';
import { replaceSecret, secretsDir, secretsRoot, trustedDir } from './secrets';

const NOTE = 'token.renew';

/**
 * Record when the token bottle `slug`'s gate holds stops working: once per gate (a gate
 * made anew has its folder emptied first; a warm gate keeps its note, which the keeper
 * moves on), or again when `replace` (a renewal).
 */
export function noteExpiringToken(
  slug: string,
  expiresAt: Date,
  env: Record<string, string | undefined>,
  replace = false,
): void {
  const dir = join(secretsRoot(env), slug);
  if (!lstatSync(dir, { throwIfNoEntry: false })?.isDirectory()) return;
  const file = join(dir, NOTE);
  if (replace) rmSync(file, { force: true });
  try {
    writeFileSync(file, `${JSON.stringify({ expiresAt: expiresAt.toISOString() })}\n`, {
      mode: 0o600,
      flag: 'wx',
    });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
}

export interface TokenKeeperOptions {
  env: Record<string, string | undefined>;
  credentials: SiteCredentials;
  /** A token this close to its end is renewed. @default 15 min */
  renewBeforeMs?: number;
  /** How often the notes are looked at. @default 60 s */
  intervalMs?: number;
  log?: (line: Record<string, unknown>) => void;
}

export interface TokenKeeper {
  /** Renew every token that is due now (what the timer does); the slugs renewed. */
  sweep(): Promise<string[]>;
  close(): void;
}

/** Keep every noted token good while its gate is there. */
export function startTokenKeeper(o: TokenKeeperOptions): TokenKeeper {
  const before = o.renewBeforeMs ?? 15 * 60_000;
  const log = o.log ?? (() => {});
  let running: Promise<string[]> | undefined;
  const sweep = async (): Promise<string[]> => {
    const root = secretsRoot(o.env);
    if (!lstatSync(root, { throwIfNoEntry: false })) return [];
    try {
      trustedDir(root, 'no token is renewed there');
    } catch (err) {
      log({ msg: 'forge tokens not renewed', error: errorMessage(err) });
      return [];
    }
    const renewed: string[] = [];
    for (const slug of readdirSync(root)) {
      const note = join(root, slug, NOTE);
      if (!lstatSync(note, { throwIfNoEntry: false })?.isFile()) continue;
      try {
        trustedDir(join(root, slug), 'its token is not renewed');
        const gate = secretsDir(slug, 'gate', o.env);
        const meta = readMeta(slug, o.env);
        // Gone, or no longer running nor warm: nothing to keep good.
        if (
          !lstatSync(gate, { throwIfNoEntry: false }) ||
          !meta?.forge ||
          (meta.status !== 'running' && !meta.warm)
        ) {
          rmSync(note, { force: true });
          continue;
        }
        trustedDir(gate, 'its token is not renewed', GATE_USER);
        const expiresAt = Date.parse(
          (JSON.parse(readFileSync(note, 'utf8')) as { expiresAt: string }).expiresAt,
        );
        if (expiresAt - Date.now() > before) continue;
        // The bottle's own repository, as the host wrote it when it made the bottle.
        const next = await o.credentials.bottleToken({
          owner: meta.forge.owner,
          repo: meta.forge.repo,
        });
        const owner = lstatSync(gate).uid === GATE_USER.uid ? GATE_USER : undefined;
        replaceSecret(gate, 'token', next.token, owner);
        noteExpiringToken(slug, next.expiresAt, o.env, true);
        renewed.push(slug);
        log({ msg: 'forge token renewed', slug, expiresAt: next.expiresAt.toISOString() });
      } catch (err) {
        // Tried again at the next sweep; the old token still works until it expires.
        log({ msg: 'forge token renewal failed', slug, error: errorMessage(err) });
      }
    }
    return renewed;
  };
  const once = () => {
    running ??= sweep().finally(() => {
      running = undefined;
    });
    return running;
  };
  const timer = setInterval(() => void once(), o.intervalMs ?? 60_000);
  timer.unref();
  return { sweep: once, close: () => clearInterval(timer) };
}
