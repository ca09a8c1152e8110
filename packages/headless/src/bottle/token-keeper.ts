/**
 * Forge tokens that expire (a GitHub App's, an hour each), kept good while a bottle's
 * gate runs. The runner notes each one it hands a gate (`noteExpiringToken`: the
 * repository and the expiry, nothing secret, beside the gate's secrets folder, where the
 * gate cannot see it); the keeper looks at the notes every minute and, for a token
 * within `renewBeforeMs` of its end, makes a new one and puts it in the gate's secrets
 * folder (atomically), where the forge sidecar, which watches that file, takes it up on
 * its next call. The agent never sees either: the folder is mounted into the gate alone.
 * The notes live in the run directory, so an orchestrator that restarts keeps renewing.
 */
import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { errorMessage } from '@bb/errors';
import type { RepoName, SiteCredentials } from '@bb/forge';
import { replaceSecret, secretsDir, secretsRoot } from './secrets';

const NOTE = 'token.renew';

interface Note extends RepoName {
  expiresAt: string;
}

/** Record that bottle `slug`'s gate holds a token for `target` that stops working at `expiresAt`. */
export function noteExpiringToken(
  slug: string,
  target: RepoName,
  expiresAt: Date,
  env: Record<string, string | undefined>,
): void {
  const dir = join(secretsRoot(env), slug);
  if (!existsSync(dir)) return;
  const note: Note = { owner: target.owner, repo: target.repo, expiresAt: expiresAt.toISOString() };
  writeFileSync(join(dir, NOTE), `${JSON.stringify(note)}\n`, { mode: 0o600 });
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

/** Keep every noted token good until its gate is gone. */
export function startTokenKeeper(o: TokenKeeperOptions): TokenKeeper {
  const before = o.renewBeforeMs ?? 15 * 60_000;
  let running: Promise<string[]> | undefined;
  const sweep = async (): Promise<string[]> => {
    const root = secretsRoot(o.env);
    if (!existsSync(root)) return [];
    const renewed: string[] = [];
    for (const slug of readdirSync(root)) {
      const file = join(root, slug, NOTE);
      let note: Note;
      try {
        note = JSON.parse(readFileSync(file, 'utf8')) as Note;
      } catch {
        continue;
      }
      const gate = secretsDir(slug, 'gate', o.env);
      // The gate is gone (the bottle was destroyed or its secrets removed): nothing to keep.
      if (!existsSync(gate)) {
        rmSync(file, { force: true });
        continue;
      }
      if (Date.parse(note.expiresAt) - Date.now() > before) continue;
      try {
        const next = await o.credentials.bottleToken({ owner: note.owner, repo: note.repo });
        const st = statSync(gate);
        replaceSecret(gate, 'token', next.token, { uid: st.uid, gid: st.gid });
        noteExpiringToken(slug, note, next.expiresAt, o.env);
        renewed.push(slug);
        o.log?.({ msg: 'forge token renewed', slug, expiresAt: next.expiresAt.toISOString() });
      } catch (err) {
        // Tried again at the next sweep; the old token still works until it expires.
        o.log?.({ msg: 'forge token renewal failed', slug, error: errorMessage(err) });
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
