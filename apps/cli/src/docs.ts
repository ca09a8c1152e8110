// The command tables of the README and docs/cli.md, made from the CLI's own
// command table (`COMMANDS`), and how they sit in those files.
import { COMMANDS, type CommandInfo, synopses } from './usage';

export const TABLE_START = '<!-- commands:start (generated: pnpm --filter @bb/cli docs) -->';
export const TABLE_END = '<!-- commands:end -->';

const code = (s: string) => `\`${s.replaceAll('|', '\\|')}\``;

/** The markdown table of every command: its synopses (subcommands' when it has them) and what it does. */
export function commandTable(
  usageOf: (c: CommandInfo) => string,
  commands: readonly CommandInfo[] = COMMANDS,
): string {
  const rows = commands.map((c) => {
    const lines = c.subcommands ? c.subcommands.flatMap(synopses) : synopses(usageOf(c));
    return `| ${lines.map(code).join('<br>')} | ${c.summary.replaceAll('|', '\\|')} |`;
  });
  return ['| command | what |', '| --- | --- |', ...rows].join('\n');
}

/** `text` with the part between the markers replaced by `table`; the markers must be there once. */
export function withTable(text: string, table: string, file: string): string {
  const a = text.indexOf(TABLE_START);
  const b = text.indexOf(TABLE_END);
  if (a === -1 || b === -1 || b < a || text.indexOf(TABLE_START, a + 1) !== -1)
    throw new Error(
      `${file} has no (or more than one) generated command table: put ${TABLE_START} and ${TABLE_END} where it goes`,
    );
  return `${text.slice(0, a + TABLE_START.length)}\n\n${table}\n\n${text.slice(b)}`;
}
