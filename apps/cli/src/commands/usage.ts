import { renderSpend, sinceOf, spendSince, summarizeSpend } from '@bb/provenance';
import { jsonText } from '@bb/wall';
import { openState } from '../deps';
import { type CliIo, parse, UsageError } from '../io';
import { USAGE_USAGE } from '../usage';

/** `bb usage`: what the agents spent, from the run records. */
export async function usageCommand(argv: string[], io: CliIo): Promise<number> {
  const { values } = parse(
    argv,
    { since: { type: 'string' }, json: { type: 'boolean' } },
    USAGE_USAGE,
  );
  let since: string;
  try {
    since = sinceOf((values['since'] as string | undefined) ?? '7d');
  } catch (err) {
    throw new UsageError((err as Error).message, USAGE_USAGE);
  }
  const state = await openState(io);
  try {
    const summary = summarizeSpend(await spendSince(state.provenance, since), since);
    io.stdout(values['json'] ? `${jsonText(summary, 2)}\n` : renderSpend(summary));
    return 0;
  } finally {
    await state.close();
  }
}
