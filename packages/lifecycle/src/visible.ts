/**
 * What a person reading the thread sees of a piece of Markdown, for an agent's
 * prompt: text the forge renders invisibly (HTML comments, link definitions
 * nothing refers to, zero-width, tag and bidi-control characters) never reaches
 * the agent unseen, and collapsed text (`<details>`) is marked as such. Each
 * removal is counted so the turn's record can say what was taken out.
 */
import { decodeNamedCharacterReference } from 'decode-named-character-reference';
import { fromMarkdown } from 'mdast-util-from-markdown';

/** One kind of hidden content taken out of one piece of text. */
export interface HiddenNote {
  /** Where it was: `issue #4`, `comment by alice`, `review by bob`. */
  from: string;
  what:
    | 'html-comment'
    | 'hidden-markup'
    | 'html-attributes'
    | 'link-title'
    | 'unused-link-definition'
    | 'invisible-characters'
    | 'collapsed-text'
    | 'unreadable'
    | 'too-long';
  /** How many (comments, definitions, characters or collapsed sections). */
  count: number;
}

export interface VisibleText {
  text: string;
  hidden: HiddenNote[];
}

// What readers never see: default-ignorable and format characters (zero-width
// ones, the tag block used for ASCII smuggling, variation selectors used for
// smuggling in emoji, Hangul fillers), bidi controls (text that reads one way
// and runs another), and the blank braille cell. A zero-width joiner between
// emoji, and the emoji presentation selector after one, are what readers see as
// one emoji, and stay.
const INVISIBLE = /[\p{Default_Ignorable_Code_Point}\p{Cf}\p{Bidi_Control}\u2800]/gu;
const EMOJI_BEFORE = /\p{Extended_Pictographic}\uFE0F?$/u;
const EMOJI_AFTER = /^\p{Extended_Pictographic}/u;

/** `text` without the characters its readers cannot see; how many went. */
export function withoutInvisible(text: string): { text: string; removed: number } {
  let removed = 0;
  const out = text.replace(INVISIBLE, (ch: string, offset: number, whole: string) => {
    const before = whole.slice(Math.max(0, offset - 3), offset);
    if (
      ch === '\u200D' &&
      EMOJI_BEFORE.test(before) &&
      EMOJI_AFTER.test(whole.slice(offset + 1, offset + 3))
    )
      return ch;
    if (ch === '\uFE0F' && /\p{Extended_Pictographic}$/u.test(before)) return ch;
    removed++;
    return '';
  });
  return { text: out, removed };
}

/**
 * Longer bodies are cut here: reading Markdown as the forge does takes up to a
 * second for 16 KiB of hostile text, and this runs on the orchestrator's own
 * thread. The rest stays on the forge, where the agent can read it.
 */
const MAX_CHARS = 16_384;
/** Lists and quotes nested deeper than this on a line are not read (their parse is slow). */
const MAX_DEPTH = 24;
const NESTING = /^(?:[ \t]{0,3}(?:>|(?:[-*+]|\d{1,9}[.)])(?=[ \t]|$))[ \t]*)+/gm;

/** Whether some line of `text` opens lists or quotes deeper than `MAX_DEPTH` (a parse would crawl). */
function tooDeep(text: string): boolean {
  for (const m of text.matchAll(NESTING))
    if ((m[0].match(/[-*+>]|\d{1,9}[.)]/g)?.length ?? 0) > MAX_DEPTH) return true;
  return false;
}

/** An entity reference (`&#8203;`, `&ZeroWidthSpace;`) readers see as nothing: an invisible character. */
const ENTITY = /&(?:#[xX]([0-9a-fA-F]{1,6})|#(\d{1,7})|([A-Za-z][A-Za-z0-9]{1,31}));/g;
function entityIsInvisible(m: RegExpMatchArray): boolean {
  const code = m[1] ? Number.parseInt(m[1], 16) : m[2] ? Number(m[2]) : undefined;
  let ch: string | false;
  if (code !== undefined) ch = code <= 0x10ffff ? String.fromCodePoint(code) : false;
  else ch = decodeNamedCharacterReference(m[3]!);
  return typeof ch === 'string' && ch.length > 0 && withoutInvisible(ch).text === '';
}

// In raw HTML, what readers never see, by how it opens and what closes it.
const OPENERS: Array<{ open: RegExp; close: string; what: HiddenNote['what'] }> = [
  { open: /^<!--/, close: '-->', what: 'html-comment' },
  { open: /^<!\[CDATA\[/, close: ']]>', what: 'hidden-markup' },
  { open: /^<[!?]/, close: '>', what: 'hidden-markup' },
  {
    open: /^<(script|style|template|noscript|textarea|title)\b/i,
    close: '',
    what: 'hidden-markup',
  },
];
/** Attributes whose value readers see (a link, an image) or that show content (`open`). */
const KEPT_ATTRIBUTES = new Set(['href', 'src', 'open']);
const TAG =
  /^<\/?([A-Za-z][A-Za-z0-9-]*)((?:\s+[^\s"'>/=]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?)*)\s*\/?>/;
const ATTRIBUTE = /\s+([^\s"'>/=]+)(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?/g;

interface MdNode {
  type: string;
  value?: string;
  identifier?: string;
  title?: string | null;
  children?: MdNode[];
  position?: { start: { offset?: number }; end: { offset?: number } };
}

/**
 * The Markdown `body` as its readers see it, for the agent: `from` names it in
 * the notes. The raw text is read as the forge reads it (invisible characters
 * included), so what its HTML hides is found where the forge finds it; then
 * the invisible characters go. Raw HTML keeps its tags but not what readers
 * never see: comments, processing instructions and declarations, scripts and
 * styles, attributes other than links. A comment or tag left open hides
 * everything after it from readers, and so from the agent. Code (fenced,
 * indented, inline) keeps its text as written: readers see it there.
 */
export function visibleMarkdown(body: string, from: string): VisibleText {
  const counts = new Map<HiddenNote['what'], number>();
  const count = (what: HiddenNote['what'], n = 1) => counts.set(what, (counts.get(what) ?? 0) + n);
  let text = body;
  let cut = 0;
  if (text.length > MAX_CHARS) {
    cut = text.length - MAX_CHARS;
    text = text.slice(0, MAX_CHARS);
  }
  let tree: MdNode | undefined;
  try {
    tree = tooDeep(text) ? undefined : (fromMarkdown(text) as unknown as MdNode);
  } catch {
    tree = undefined;
  }
  if (!tree)
    return {
      text: '[bot-bottle did not pass this text on: it nests lists or quotes too deeply to read safely. Read it on the forge.]',
      hidden: [{ from, what: 'unreadable', count: 1 }],
    };
  const edits: Array<{ start: number; end: number; with: string }> = [];
  const referenced = new Set<string>();
  const defs: Array<{ label: string; node: MdNode; start: number; end: number }> = [];
  const htmls: Array<{ start: number; end: number; value: string }> = [];
  const kept: Array<{ start: number; end: number }> = [];
  const titled: Array<{ node: MdNode; start: number; end: number }> = [];
  // In document order, without recursion (a deep tree must not overflow the stack).
  const stack: MdNode[] = [tree];
  while (stack.length > 0) {
    const node = stack.pop()!;
    const start = node.position?.start.offset;
    const end = node.position?.end.offset;
    if (start !== undefined && end !== undefined) {
      if (node.type === 'linkReference' || node.type === 'imageReference')
        referenced.add(node.identifier ?? '');
      else if (node.type === 'definition')
        defs.push({ label: node.identifier ?? '', node, start, end });
      else if (node.type === 'html' && node.value !== undefined)
        htmls.push({ start, end, value: text.slice(start, end) });
      else if (node.type === 'code' || node.type === 'inlineCode') kept.push({ start, end });
      if ((node.type === 'link' || node.type === 'image') && node.title)
        titled.push({ node, start, end });
    }
    const children = node.children ?? [];
    for (let i = children.length - 1; i >= 0; i--) stack.push(children[i]!);
  }
  hideHtml(text, htmls, edits, count);
  // A definition counts when something uses it, and only its label's first one does.
  const seen = new Set<string>();
  for (const d of defs) {
    if (!referenced.has(d.label) || seen.has(d.label)) {
      count('unused-link-definition');
      edits.push({ start: d.start, end: d.end, with: '' });
    } else if (d.node.title) {
      count('link-title');
      const src = text.slice(d.start, d.end);
      edits.push({ start: d.start, end: d.end, with: src.replace(TITLE_AT_END, '') });
    }
    seen.add(d.label);
  }
  for (const l of titled) {
    const src = text.slice(l.start, l.end);
    const without = src.replace(TITLE_IN_PARENS, ')');
    if (without !== src) {
      count('link-title');
      edits.push({ start: l.start, end: l.end, with: without });
    }
  }
  // Invisible characters written as entity references, outside code (where they show as written).
  for (const m of text.matchAll(ENTITY))
    if (!kept.some((k) => m.index >= k.start && m.index < k.end) && entityIsInvisible(m)) {
      count('invisible-characters');
      edits.push({ start: m.index, end: m.index + m[0].length, with: '' });
    }
  let out = applyEdits(text, edits);
  const chars = withoutInvisible(out);
  out = chars.text;
  count('invisible-characters', chars.removed);
  if (cut > 0) {
    count('too-long');
    out += `\n[bot-bottle cut this text here: ${cut} more characters are on the forge, where the forge tools read it]`;
  }
  const hidden: HiddenNote[] = [];
  for (const [what, n] of counts) if (n > 0) hidden.push({ from, what, count: n });
  // Every line ending one way, so a quote of this text cannot be broken out of.
  out = out.replace(/\r\n?|[\u2028\u2029\u0085\v\f]/g, '\n');
  return { text: hidden.length > 0 ? out.replace(/\n{3,}/g, '\n\n').trim() : out, hidden };
}

const TITLE_IN_PARENS = /\s+(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\((?:[^()\\]|\\.)*\))\s*\)$/s;
const TITLE_AT_END = /\s+(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|\((?:[^()\\]|\\.)*\))\s*$/s;

/** `text` with `edits` made; an edit that overlaps one before it in the text (an outer one) is dropped. */
function applyEdits(
  text: string,
  edits: Array<{ start: number; end: number; with: string }>,
): string {
  const taken: typeof edits = [];
  for (const e of [...edits].sort((x, y) => x.start - y.start || y.end - x.end)) {
    const last = taken.at(-1);
    if (last && e.start < last.end) continue;
    taken.push(e);
  }
  let out = text;
  for (const e of taken.reverse()) out = out.slice(0, e.start) + e.with + out.slice(e.end);
  return out;
}

/**
 * Raw HTML as readers see it: the HTML of a document is the HTML of its blocks
 * run together, so a comment (or a tag, a declaration) one block opens hides
 * the text after it until some later raw HTML closes it, or to the end.
 */
function hideHtml(
  text: string,
  htmls: Array<{ start: number; end: number; value: string }>,
  edits: Array<{ start: number; end: number; with: string }>,
  count: (what: HiddenNote['what'], n?: number) => void,
): void {
  let open: { from: number; close: string } | undefined;
  for (const h of htmls) {
    let i = 0;
    let rebuilt = '';
    const v = h.value;
    if (open) {
      const at = v.indexOf(open.close);
      if (at < 0) continue;
      edits.push({ start: open.from, end: h.start + at + open.close.length, with: '' });
      i = at + open.close.length;
      open = undefined;
    }
    let changed = i > 0;
    const keepFrom = i;
    while (i < v.length) {
      const lt = v.indexOf('<', i);
      if (lt < 0) {
        rebuilt += v.slice(i);
        break;
      }
      rebuilt += v.slice(i, lt);
      const rest = v.slice(lt);
      const hider = OPENERS.find((o) => o.open.test(rest));
      if (hider) {
        count(hider.what);
        changed = true;
        const close = hider.close || `</${/^<([A-Za-z]+)/.exec(rest)![1]!.toLowerCase()}`;
        const at = rest.toLowerCase().indexOf(close.toLowerCase(), hider.close ? 2 : 1);
        if (at < 0) {
          open = { from: h.start + lt, close: hider.close || '>' };
          break;
        }
        // A closing tag runs to its own `>`.
        const endAt = hider.close ? at + close.length : rest.indexOf('>', at) + 1 || rest.length;
        i = lt + endAt;
        continue;
      }
      const tag = TAG.exec(rest);
      if (!tag) {
        // A `<` that opens a tag the forge's parser would read on past this block: hidden from here.
        if (/^<\/?[A-Za-z]/.test(rest)) {
          count('hidden-markup');
          changed = true;
          open = { from: h.start + lt, close: '>' };
          break;
        }
        rebuilt += '<';
        i = lt + 1;
        continue;
      }
      const name = tag[1]!.toLowerCase();
      const attrs = [...(tag[2] ?? '').matchAll(ATTRIBUTE)];
      const keep = attrs.filter((a) => KEPT_ATTRIBUTES.has(a[1]!.toLowerCase()));
      if (keep.length < attrs.length) {
        count('html-attributes', attrs.length - keep.length);
        changed = true;
      }
      const closing = tag[0].startsWith('</');
      if (name === 'details' && !closing && !keep.some((a) => a[1]!.toLowerCase() === 'open')) {
        count('collapsed-text');
        changed = true;
        rebuilt += '[collapsed on the forge: readers see this only when they open it]';
      } else if (name === 'details' && closing) {
        changed = true;
        rebuilt += '[end of the collapsed text]';
      } else
        rebuilt +=
          keep.length < attrs.length
            ? `<${closing ? '/' : ''}${tag[1]}${keep.map((a) => a[0]).join('')}>`
            : tag[0];
      i = lt + tag[0].length;
    }
    if (open) {
      edits.push({ start: h.start + keepFrom, end: open.from, with: rebuilt });
      continue;
    }
    if (changed) edits.push({ start: h.start + keepFrom, end: h.end, with: rebuilt });
  }
  // Left open: the forge shows nothing after it.
  if (open) edits.push({ start: open.from, end: text.length, with: '' });
}

/** Plain text (a title, a name) as its readers see it. */
export function visiblePlain(text: string, from: string): VisibleText {
  const { text: out, removed } = withoutInvisible(text);
  return {
    // One line, as a title shows.
    text: out.replace(/\r\n?|[\n\u2028\u2029\u0085\v\f]/g, ' '),
    hidden: removed > 0 ? [{ from, what: 'invisible-characters', count: removed }] : [],
  };
}

const WORDS: Record<HiddenNote['what'], (n: number) => string> = {
  'html-comment': (n) => (n === 1 ? 'an HTML comment' : `${n} HTML comments`),
  'hidden-markup': (n) =>
    n === 1 ? 'markup the forge does not show' : `${n} pieces of markup the forge does not show`,
  'html-attributes': (n) => (n === 1 ? 'an HTML attribute' : `${n} HTML attributes`),
  'link-title': (n) => (n === 1 ? 'a link title' : `${n} link titles`),
  unreadable: () => 'text too deeply nested to read safely',
  'too-long': () => 'text past its length limit',
  'unused-link-definition': (n) =>
    n === 1 ? 'a link definition nothing uses' : `${n} link definitions nothing uses`,
  'invisible-characters': (n) => (n === 1 ? 'an invisible character' : `${n} invisible characters`),
  'collapsed-text': (n) =>
    n === 1 ? 'a collapsed section (marked, kept)' : `${n} collapsed sections (marked, kept)`,
};

/** One line for the agent saying what was taken out of `from`'s text, when anything was. */
export function hiddenLine(notes: HiddenNote[]): string {
  const removed = notes.filter((n) => n.what !== 'collapsed-text');
  if (removed.length === 0) return '';
  return `(bot-bottle took out what readers of this text cannot see: ${removed.map((n) => WORDS[n.what](n.count)).join(', ')}.)`;
}

/**
 * Text of several people's pieces, each made visible as its readers see it, with
 * every note kept: what one prompt quotes.
 */
export class Seen {
  readonly hidden: HiddenNote[] = [];

  /** Markdown `body` from `from`, as its readers see it (and a line saying what went). */
  md(body: string, from: string): string {
    const v = visibleMarkdown(body, from);
    this.hidden.push(...v.hidden);
    const line = hiddenLine(v.hidden);
    return line ? `${v.text}\n${line}` : v.text;
  }

  /** Plain `text` (a title) from `from`, as its readers see it. */
  plain(text: string, from: string): string {
    const v = visiblePlain(text, from);
    this.hidden.push(...v.hidden);
    return v.text;
  }
}
