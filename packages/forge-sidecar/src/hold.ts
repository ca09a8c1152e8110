/**
 * Fencing for the writes an agent makes: the host that runs a bottle holds its
 * issue for a while at a time (a fleet's lease), and says so in a file beside
 * the gate's op log, where the agent cannot write: the gate's id and the wall
 * time until which it may write. The host renews it with each lease renewal. A
 * host that stalls (a long pause, a stopped VM) stops renewing, so its gates stop
 * writing by the time its lease can be taken over, and a gate the new holder does
 * not run (another machine's, or an earlier turn's) finds another id there and
 * writes nothing. Without the file's variables (one orchestrator, no fleet) no
 * hold is asked for.
 */
import { readFileSync } from 'node:fs';

/** The hold file's name in the gate's state folder. */
export const HOLD_FILE = 'hold';

/** What the host writes into the hold file: this gate's id, and until when it may write. */
export function formatHold(id: string, untilMs: number): string {
  return `${id} ${Math.floor(untilMs)}\n`;
}

/**
 * Whether the gate `id` is held now, read from `file` when asked: `undefined`
 * when it is, else why not (said to the agent, so nothing of the host's).
 */
export function holdReader(
  file: string,
  id: string,
  now: () => number = Date.now,
  monotonic: () => number = () => performance.now(),
): () => string | undefined {
  // Each renewal's deadline also as this process's monotonic time, taken when first
  // read: a wall clock stepped back (NTP, a VM resumed with its old time) does not
  // stretch it.
  let seen: { text: string; until: number } | undefined;
  return () => {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      return 'the host has not said it holds this issue';
    }
    const [holder, until] = text.trim().split(' ');
    if (holder !== id) return 'another host runs this bottle now';
    const ms = Number(until);
    if (!Number.isSafeInteger(ms)) return "the host's hold on this issue ran out";
    if (seen?.text !== text) seen = { text, until: monotonic() + (ms - now()) };
    if (now() >= ms || monotonic() >= seen.until)
      return `the host's hold on this issue ran out at ${new Date(ms).toISOString()} (it may have stalled, or another host may be taking the issue over)`;
    return undefined;
  };
}
