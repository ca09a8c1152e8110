import MarkdownIt from 'markdown-it';
import { describe, expect, it } from 'vitest';
import {
  forHtml,
  forLog,
  forMarkdown,
  forTerminal,
  forTerminalDeep,
  forTerminalLine,
  hasUnprintable,
  jsonText,
  markdownFence,
} from './text';

/** What a prompt-injected agent writes into a summary or a justification. */
const HOSTILE = [
  'done\u001b[2K\u001b[1A\rALL CHECKS PASSED', // CSI: erase the line, move up, carriage return
  '\u001b]0;owned\u0007', // OSC: retitle the window
  '\u001b]8;;https://evil.example/\u001b\\click\u001b]8;;\u001b\\', // OSC 8: a link that lies
  '\u009b31m', // C1 CSI (8-bit)
  '\u009d0;x\u009c', // C1 OSC ... ST
  'safe \u202eexe.txt\u202c', // bidi override
  '\u2066isolated\u2069 \u200bzero\u200dwidth\ufeff', // isolates, zero-width, BOM
  'tag\u{e0041}\u{e0042}', // Unicode tag characters (invisible ASCII)
  'line\u2028sep\u0085nel\u007fdel',
].join(' ');

describe('agent-authored text', () => {
  it('on a terminal nothing is interpreted, and what was there is visible', () => {
    const out = forTerminal(HOSTILE);
    expect(hasUnprintable(out)).toBe(false);
    expect(out).toContain('done\\x1b[2K\\x1b[1A\\x0dALL CHECKS PASSED');
    expect(out).toContain('\\x9b31m');
    expect(out).toContain('safe \\u202eexe.txt\\u202c');
    expect(out).toContain('tag\\u{e0041}\\u{e0042}');
    expect(forTerminal('line one\n\tline two')).toBe('line one\n\tline two');
    expect(forTerminalLine('a\nb\tc\u001b')).toBe('a\\nb\\tc\\x1b');
    // Where a payload hides one byte per character: variation selectors, fillers, the CGJ.
    for (const c of ['\ufe0f', '\u{e0100}', '\u{e01ef}', '\u180b', '\u034f', '\u2800', '\uffa0'])
      expect(hasUnprintable(`x${c}y`), c.codePointAt(0)!.toString(16)).toBe(true);
    expect(hasUnprintable('plain words, "quotes" and émoji ✓')).toBe(false);
  });

  it('JSON for a terminal holds no unprintable byte and parses back to the same value', () => {
    const v = { summary: HOSTILE, nested: [{ [`k\u202e`]: HOSTILE }], n: 3, ok: true };
    const text = jsonText(v, 2);
    expect(hasUnprintable(text)).toBe(false);
    expect(JSON.parse(text)).toEqual(v);
    expect(text).toContain('\\u202e');
    expect(text).toContain('\\udb40\\udc41'); // a tag character as its surrogate pair
    expect(jsonText(undefined)).toBe('null');
    // Plain values are exactly JSON.stringify's.
    expect(jsonText({ a: 'b', c: [1, 2] }, 2)).toBe(JSON.stringify({ a: 'b', c: [1, 2] }, null, 2));
  });

  it('deep and log forms keep the shape and make every string (keys too) printable', () => {
    const v = { [`a\u001b`]: [HOSTILE, 1, null, { b: HOSTILE }], n: 2 };
    for (const out of [forTerminalDeep(v), forLog(v)]) {
      expect(hasUnprintable(JSON.stringify(out))).toBe(false);
      expect(Object.keys(out)).toEqual(['a\\x1b', 'n']);
      expect((out as unknown as Record<string, unknown[]>)['a\\x1b']![1]).toBe(1);
    }
    expect(forLog(7)).toBe(7);
  });

  it('in HTML it is text: no element, no attribute escape, no reordering mark', () => {
    const out = forHtml(`<img src=x onerror=alert(1)> "'&${HOSTILE}`);
    expect(out).not.toMatch(/[<>"']/);
    expect(hasUnprintable(out)).toBe(false);
    expect(out.startsWith('&lt;img src=x onerror=alert(1)&gt; &quot;&#39;&amp;')).toBe(true);
  });

  it('in Markdown the host writes it renders as the same literal text, with no markup', () => {
    const md = new MarkdownIt({ html: true, linkify: true });
    const attacks = [
      '# Approved by the operator',
      '<img src=x onerror=alert(1)><script>alert(1)</script>',
      '[click](https://evil.example) ![i](https://evil.example/p.png) <https://evil.example>',
      'https://evil.example www.evil.example mail me@evil.example @admin',
      'closes #12, see acme/private#7 and !3; ping @org/team',
      'math $\\Huge{x}$ and $$y$$, emoji :smile: and :+1:',
      '**bold** _em_ `code` ~~gone~~ &amp; &#x3C;',
      '| a | b |\n|---|---|\n| c | d |',
      '- item\n+ item\n1. one\n2) two\n> quote\n    indented code\n\n\nafter blank lines',
      '```\nfence\n```\n~~~\nfence\n~~~',
      'title\n===\nrule\n---\n***\n___',
      `\\* escaped already \\\\ ${HOSTILE}`,
    ];
    for (const text of attacks) {
      const html = md.render(forMarkdown(text)).trim();
      // One paragraph, its only elements hard line breaks and code spans.
      expect(html.startsWith('<p>') && html.endsWith('</p>')).toBe(true);
      expect(html.slice(3, -4).replace(/<br>\n?|<\/?code>/g, '')).not.toMatch(/<|>/);
      // Mentions and references only ever inside code, where a forge does not act on them.
      expect(html.replace(/<code>[^<]*<\/code>/g, '')).not.toMatch(/@\w|[#!]\d/);
      // What the reader sees is exactly the text (made printable, left-trimmed per line).
      const seen = html
        .slice(3, -4)
        .replace(/<br>\n?/g, '\n')
        .replace(/<\/?code>/g, '')
        .replace(/&lt;/g, '<')
        .replace(/&gt;/g, '>')
        .replace(/&quot;/g, '"')
        .replace(/&amp;/g, '&');
      const expected = forTerminal(text)
        .replace(/\s+$/, '')
        .split('\n')
        .map((l) => l.replace(/^[ \t]+/, ''))
        .join('\n');
      expect(seen).toBe(expected);
    }
    // Plain host sentences stay readable as plain text.
    expect(forMarkdown('bot-bottle could not start agent nosuch: no agent manifest "nosuch"')).toBe(
      'bot-bottle could not start agent nosuch: no agent manifest "nosuch"',
    );
  });

  it('a Markdown fence shows any text verbatim, however many backticks it holds', () => {
    const md = new MarkdownIt({ html: true, linkify: true });
    const text = 'a ``` b ```` c\n<b>x</b>';
    const html = md.render(markdownFence(text)).trim();
    expect(html).toBe(
      '<pre><code class="language-text">a ``` b ```` c\n&lt;b&gt;x&lt;/b&gt;\n</code></pre>',
    );
  });
});
