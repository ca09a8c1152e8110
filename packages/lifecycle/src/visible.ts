/**
 * What a person reading the thread sees of a piece of Markdown, for an agent's
 * prompt: text the forge renders invisibly (HTML comments, link definitions
 * nothing refers to, zero-width, tag and bidi-control characters) never reaches
 * the agent unseen, and collapsed text (`<details>`) is marked as such. Each
 * removal is counted so the turn's record can say what was taken out.
 */
import { fromMarkdown } from 'mdast-util-from-markdown';

/** One kind of hidden content taken out of one piece of text. */
export interface HiddenNote {
  /** Where it was: `issue #4`, `comment by alice`, `review by bob`. */
  from: string;
  what: 'html-comment' | 'unused-link-definition' | 'invisible-characters' | 'collapsed-text';
  /** How many (comments, definitions, characters or collapsed sections). */
  count: number;
}

export interface VisibleText {
  text: string;
  hidden: HiddenNote[];
}

// Zero-width and other invisible format characters, the tag block (ASCII smuggling),
// the supplementary variation selectors (smuggling in emoji) and bidi controls
// (text that reads one way and runs another). A zero-width joiner inside an emoji
// sequence is what readers see as one emoji, and stays.
const INVISIBLE =
  // biome-ignore lint/suspicious/noMisleadingCharacterClass: each one is removed alone, joiners and combiners included
  /[\u00AD\u034F\u061C\u115F\u1160\u17B4\u17B5\u180B-\u180F\u200B-\u200F\u202A-\u202E\u2060-\u2064\u2066-\u206F\u3164\uFEFF\uFFA0\uFFF9-\uFFFB\u{E0000}-\u{E007F}\u{E0100}-\u{E01EF}]/gu;
const EMOJI_BEFORE = /\p{Extended_Pictographic}\uFE0F?$/u;
const EMOJI_AFTER = /^\p{Extended_Pictographic}/u;

/** `text` without the characters its readers cannot see; how many went. */
export function withoutInvisible(text: string): { text: string; removed: number } {
  let removed = 0;
  const out = text.replace(INVISIBLE, (ch: string, offset: number, whole: string) => {
    if (
      ch === '\u200D' &&
      EMOJI_BEFORE.test(whole.slice(Math.max(0, offset - 3), offset)) &&
      EMOJI_AFTER.test(whole.slice(offset + 1, offset + 3))
    )
      return ch;
    removed++;
    return '';
  });
  return { text: out, removed };
}

const COMMENT = /<!--[\s\S]*?(?:-->|$)/g;
const DETAILS_OPEN = /<details\b[^>]*>/gi;
const DETAILS_CLOSE = /<\/details\s*>/gi;

/**
 * The Markdown `body` as its readers see it, for the agent: `from` names it in
 * the notes. Code (fenced, indented, inline) keeps its HTML as written: readers
 * see it there.
 */
export function visibleMarkdown(body: string, from: string): VisibleText {
  const chars = withoutInvisible(body);
  const text = chars.text;
  const edits: Array<{ start: number; end: number; with: string }> = [];
  let comments = 0;
  let definitions = 0;
  let collapsed = 0;
  const tree = fromMarkdown(text);
  const referenced = new Set<string>();
  const defs: Array<{ label: string; start: number; end: number }> = [];
  const walk = (node: {
    type: string;
    value?: string;
    identifier?: string;
    children?: unknown[];
    position?: { start: { offset?: number }; end: { offset?: number } };
  }) => {
    const start = node.position?.start.offset;
    const end = node.position?.end.offset;
    if (node.type === 'linkReference' || node.type === 'imageReference')
      referenced.add(node.identifier ?? '');
    if (node.type === 'definition' && start !== undefined && end !== undefined)
      defs.push({ label: node.identifier ?? '', start, end });
    if (node.type === 'html' && node.value !== undefined && start !== undefined) {
      let html = node.value;
      html = html.replace(COMMENT, () => {
        comments++;
        return '';
      });
      html = html.replace(DETAILS_OPEN, () => {
        collapsed++;
        return '[collapsed on the forge: readers see this only when they open it]';
      });
      html = html.replace(DETAILS_CLOSE, '[end of the collapsed text]');
      if (html !== node.value) edits.push({ start, end: end ?? text.length, with: html });
    }
    for (const c of node.children ?? []) walk(c as typeof node);
  };
  walk(tree as unknown as Parameters<typeof walk>[0]);
  for (const d of defs)
    if (!referenced.has(d.label)) {
      definitions++;
      edits.push({ start: d.start, end: d.end, with: '' });
    }
  let out = text;
  for (const e of edits.sort((a, b) => b.start - a.start))
    out = out.slice(0, e.start) + e.with + out.slice(e.end);
  const hidden: HiddenNote[] = [];
  const note = (what: HiddenNote['what'], count: number) => {
    if (count > 0) hidden.push({ from, what, count });
  };
  note('html-comment', comments);
  note('unused-link-definition', definitions);
  note('invisible-characters', chars.removed);
  note('collapsed-text', collapsed);
  return { text: hidden.length > 0 ? out.replace(/\n{3,}/g, '\n\n').trim() : out, hidden };
}

/** Plain text (a title, a name) as its readers see it. */
export function visiblePlain(text: string, from: string): VisibleText {
  const { text: out, removed } = withoutInvisible(text);
  return {
    text: out,
    hidden: removed > 0 ? [{ from, what: 'invisible-characters', count: removed }] : [],
  };
}

const WORDS: Record<HiddenNote['what'], (n: number) => string> = {
  'html-comment': (n) => (n === 1 ? 'an HTML comment' : `${n} HTML comments`),
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
