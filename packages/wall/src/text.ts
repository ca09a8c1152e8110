/**
 * Text the agent wrote, made safe for each place the host shows it (THREAT-MODEL I8).
 *
 * A prompt-injected agent writes summaries, justifications, comments, commit
 * messages and file names that the host later shows to people: on a terminal
 * (where an escape sequence can clear lines, retitle the window, hide text or
 * write a link that lies), in JSON piped to a terminal, in HTML, in Markdown the
 * host posts to the forge, and in log lines. Every such place goes through one of
 * the functions below, chosen for its medium; none of them interprets anything.
 *
 * What counts as unprintable is one list, {@link UNPRINTABLE}: C0 and C1 control
 * characters (but newline and tab), DEL, and the invisible or reordering marks a
 * reader cannot see: zero-width characters, bidirectional overrides and isolates,
 * line and paragraph separators, the byte-order mark, Unicode tag characters.
 */

/**
 * The characters no medium shows as themselves: controls, invisible and
 * bidirectional marks, fillers, variation selectors (a payload can hide in them,
 * one byte each), tags.
 */
export const UNPRINTABLE = new RegExp(
  // A string, not a literal: some of these are combining marks (variation selectors),
  // which a linter would take for a misleading character class.
  [
    '[\\u0000-\\u0008\\u000b-\\u001f\\u007f-\\u00a0\\u00ad\\u034f\\u061c\\u115f\\u1160\\u17b4\\u17b5',
    '\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0f\\ufeff',
    '\\uffa0\\ufff9-\\ufffb\\u{1bca0}-\\u{1bca3}\\u{1d173}-\\u{1d17a}\\u{e0000}-\\u{e007f}\\u{e0100}-\\u{e01ef}]',
  ].join(''),
  'gu',
);

const hex = (n: number, width: number) => n.toString(16).padStart(width, '0');

/** How one unprintable character is written visibly: `\xNN` below 0x100, else `\uNNNN` or `\u{NNNNN}`. */
function visible(c: string): string {
  const cp = c.codePointAt(0)!;
  if (cp < 0x100) return `\\x${hex(cp, 2)}`;
  return cp > 0xffff ? `\\u{${hex(cp, 5)}}` : `\\u${hex(cp, 4)}`;
}

/**
 * For a terminal: every unprintable character written as a visible escape
 * (`\x1b`, `\u202e`); newlines and tabs stay. The result contains nothing a
 * terminal acts on.
 */
export function forTerminal(text: string): string {
  return String(text).replace(UNPRINTABLE, visible);
}

/** One line for a terminal: as {@link forTerminal}, with newlines and tabs shown as `\n` and `\t` too. */
export function forTerminalLine(text: string): string {
  return forTerminal(text).replace(/\n/g, '\\n').replace(/\t/g, '\\t');
}

/** Every string in a JSON-shaped value (keys too) made printable with {@link forTerminal}. */
export function forTerminalDeep<T>(value: T): T {
  return JSON.parse(JSON.stringify(value), function (this: unknown, _k, x) {
    if (typeof x === 'string') return forTerminal(x);
    if (x && typeof x === 'object' && !Array.isArray(x))
      return Object.fromEntries(Object.entries(x).map(([k, v]) => [forTerminal(k), v]));
    return x;
  }) as T;
}

/**
 * JSON for a terminal or a pipe: exactly `JSON.stringify(value, null, space)`
 * except that every unprintable character inside a string is written as a `\u`
 * escape. It parses back to the same value (nothing is lost), and the bytes on
 * the terminal hold no control character, invisible or bidirectional mark.
 */
export function jsonText(value: unknown, space?: number): string {
  const out = JSON.stringify(value, null, space);
  if (out === undefined) return 'null';
  // Unprintable characters only ever occur inside strings in JSON's output, so
  // a `\u` escape of each UTF-16 unit keeps the text valid and the value intact.
  return out.replace(UNPRINTABLE, (c) =>
    [...Array(c.length).keys()].map((i) => `\\u${hex(c.charCodeAt(i), 4)}`).join(''),
  );
}

const HTML: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

/** For HTML text or an attribute value: markup escaped, unprintable characters shown as escapes. */
export function forHtml(value: unknown): string {
  return forTerminal(String(value ?? '')).replace(/[&<>"']/g, (c) => HTML[c]!);
}

/**
 * For Markdown the host writes (a forge comment, a PR body): the text as
 * literal characters, never markup, and still readable as plain text.
 * Unprintable characters are shown as escapes; every character that can open
 * inline markup (emphasis, code, links, images, HTML, entities, strikethrough,
 * tables, mentions) is backslash-escaped; a line that would start a block
 * (heading, list, quote, fence, rule, setext underline) has its first mark
 * escaped and lines lose their indentation (no code block); scheme and `www.`
 * autolinks are broken; math (`$`) and emoji codes (`:name:`) are escaped.
 * Mentions (`@name`) and issue references (`#12`, `owner/repo#12`, `!12`) are
 * put in code spans, since a forge finds those in the text with its escapes
 * removed (Gitea notifies and cross-references them) but never inside code.
 * Newlines become hard line breaks (`\\` at the line's end) inside the one
 * paragraph, so a blank line cannot start a block either.
 */
export function forMarkdown(text: string): string {
  return forTerminal(text)
    .replace(/\s+$/, '')
    .split('\n')
    .map((line) => {
      // Mentions and references first, as code spans of their own (backtick-free).
      const parts = line.replace(/^[ \t]+/, '').split(REFERENCE);
      return parts
        .map((part, i) =>
          i % 2 === 1
            ? `\`${part}\``
            : part
                .replace(/[\\`*_[\]<>&|~!@$]/g, (c) => `\\${c}`)
                .replace(/:(?=\/\/|[a-z0-9_+-]+:)/gi, '\\:')
                .replace(/\b(www)\./gi, '$1\\.'),
        )
        .join('')
        .replace(/^([#>+=-])/, '\\$1')
        .replace(/^(\d+)([.)])/, '$1\\$2');
    })
    .join('\\\n');
}

/** A mention or an issue reference a forge acts on: `@name`, `#12`, `owner/repo#12`, `!12`. */
const REFERENCE = /((?:[\w.-]+\/[\w.-]+)?[#!]\d+|@[\w.-]+)/;

/** One block of Markdown showing `text` verbatim: a code fence longer than any run of backticks in it. */
export function markdownFence(text: string, info = 'text'): string {
  const body = forTerminal(text).trimEnd();
  const fence = '`'.repeat(Math.max(3, ...[...body.matchAll(/`+/g)].map((m) => m[0].length + 1)));
  return `${fence}${info}\n${body}\n${fence}`;
}

/**
 * For a log line's fields: every string in the value made printable (a log
 * read with `tail -f` or `less -R` is a terminal too). Numbers, booleans and
 * the value's shape are kept.
 */
export function forLog<T>(value: T): T {
  if (typeof value === 'string') return forTerminal(value) as T;
  if (!value || typeof value !== 'object') return value;
  if (Array.isArray(value)) return value.map(forLog) as T;
  if (value instanceof Error) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[forTerminal(k)] = forLog(v);
  return out as T;
}

/** Whether `text` holds anything {@link UNPRINTABLE} (for checks and tests). */
export function hasUnprintable(text: string): boolean {
  return new RegExp(UNPRINTABLE.source, 'u').test(text);
}
