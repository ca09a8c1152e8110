import { isReservedSecret, parseRules, RoutesFileSchema } from '@bb/egress';
import { BbError } from '@bb/errors';
import { z } from 'zod';
import { KINDS, type ProposalKind } from './contract';

/** What a proposal is checked against before anyone sees it. */
export interface ValidationContext {
  /** Images a Dockerfile may start `FROM`: the bottle's own and the operator's allowed bases. */
  allowedBases: readonly string[];
  /** The operator's own edit: secrets may also be referenced as file:/path. @default false */
  operator?: boolean;
}

export const AllowlistFileSchema = z.object({ allow: z.array(z.string()) }).strict();

/** A label key bot-bottle keeps for itself, at the start of a LABEL or after a space. */
const RESERVED_LABEL = /(^|[\s"'])(bb|forklift)\./i;

/** One instruction of a Dockerfile, continuation lines joined. */
export interface DockerInstruction {
  keyword: string;
  args: string;
  line: number;
}

const INSTRUCTIONS = new Set([
  'ADD',
  'ARG',
  'CMD',
  'COPY',
  'ENTRYPOINT',
  'ENV',
  'EXPOSE',
  'FROM',
  'HEALTHCHECK',
  'LABEL',
  'MAINTAINER',
  'ONBUILD',
  'RUN',
  'SHELL',
  'STOPSIGNAL',
  'USER',
  'VOLUME',
  'WORKDIR',
]);

/**
 * Parse a Dockerfile into instructions, or throw naming the first bad line.
 * It reads a deliberately small Dockerfile language that Docker's classic builder
 * reads the same way: LF line endings; spaces and tabs only; no parser directive
 * (`# escape=`, `# syntax=`); no heredoc; a line continued with a backslash only
 * inside `RUN` (whatever Docker and we join there stays one RUN, which runs without
 * network). Anything that could mean one thing to us and another to Docker is refused.
 */
export function parseDockerfile(text: string): DockerInstruction[] {
  const out: DockerInstruction[] = [];
  const odd =
    /[^\S \t\n]|[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/.exec(
      text,
    );
  if (odd)
    throw new BbError(
      'INVALID_INPUT',
      `Dockerfile: character U+${odd[0].charCodeAt(0).toString(16).padStart(4, '0')} at line ${text.slice(0, odd.index).split('\n').length} is not allowed; use LF line endings, spaces and tabs`,
    );
  const lines = text.split('\n');
  let pending: { text: string; line: number } | undefined;
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i]!;
    const trimmed = raw.replace(/^[ \t]+|[ \t]+$/g, '');
    if (!pending && out.length === 0 && /^#\s*[a-zA-Z]+\s*=/.test(trimmed))
      throw new BbError(
        'INVALID_INPUT',
        `Dockerfile line ${i + 1}: parser directives (${trimmed}) are not allowed`,
      );
    if (trimmed === '' || trimmed.startsWith('#')) continue;
    const start = pending?.line ?? i + 1;
    const text = pending ? `${pending.text} ${trimmed}` : trimmed;
    if (/\\[ \t]*$/.test(raw)) {
      if (!/^RUN[ \t]/i.test(text))
        throw new BbError(
          'INVALID_INPUT',
          `Dockerfile line ${start}: only RUN may continue on the next line; write ${JSON.stringify(text.split(/[ \t]/)[0])} on one line`,
        );
      pending = { text: text.replace(/\\[ \t]*$/, '').replace(/[ \t]+$/, ''), line: start };
      continue;
    }
    pending = undefined;
    push({ text, line: start });
  }
  if (pending) push(pending);
  return out;

  function push(p: { text: string; line: number }) {
    const m = /^([A-Za-z]+)(?:[ \t]+([\s\S]*))?$/.exec(p.text);
    const keyword = m?.[1]?.toUpperCase();
    if (!m || !keyword || !INSTRUCTIONS.has(keyword))
      throw new BbError(
        'INVALID_INPUT',
        `Dockerfile line ${p.line}: ${JSON.stringify(p.text.slice(0, 60))} is not a Dockerfile instruction`,
      );
    const args = (m[2] ?? '').trim();
    if (/<</.test(args) && ['RUN', 'COPY'].includes(keyword))
      throw new BbError(
        'INVALID_INPUT',
        `Dockerfile line ${p.line}: heredocs are not allowed; write the file with RUN printf`,
      );
    out.push({ keyword, args, line: p.line });
  }
}

/** The images a Dockerfile's stages start from (stage names it defines itself left out). */
export function baseImagesOf(
  instructions: readonly DockerInstruction[],
): Array<{ image: string; line: number }> {
  const stages = new Set<string>();
  const out: Array<{ image: string; line: number }> = [];
  for (const ins of instructions) {
    if (ins.keyword !== 'FROM') continue;
    const words = ins.args.split(/\s+/).filter((w) => !w.startsWith('--'));
    const image = words[0] ?? '';
    if (words.length >= 3 && words[1]?.toUpperCase() === 'AS') stages.add(words[2]!.toLowerCase());
    if (!stages.has(image.toLowerCase()) || words[2]?.toLowerCase() === image.toLowerCase())
      out.push({ image, line: ins.line });
  }
  return out;
}

const sameImage = (a: string, b: string) => {
  const norm = (s: string) => (/:[^/]+$/.test(s) || s.includes('@') ? s : `${s}:latest`);
  return norm(a) === norm(b);
};

/**
 * Check a proposed file before it reaches anyone. Throws `INVALID_INPUT` listing
 * every problem and what to do; returns the parsed content.
 */
export function validateProposal(kind: ProposalKind, text: string, ctx: ValidationContext): void {
  const problems: string[] = [];
  const name = KINDS[kind].file;
  if (kind === 'dockerfile') {
    let instructions: DockerInstruction[] = [];
    try {
      instructions = parseDockerfile(text);
    } catch (err) {
      problems.push((err as Error).message);
    }
    const first = instructions.find((i) => i.keyword !== 'ARG');
    if (instructions.length && first?.keyword !== 'FROM')
      problems.push(`Dockerfile line ${first?.line}: the first instruction must be FROM`);
    // Nothing may come from outside the allowed bases. The build's context is the
    // Dockerfile alone, so ADD has no use but a download (which the engine would make on
    // the host's network): refused. COPY and RUN --mount take only from stages that are
    // finished, named literally.
    const finished = new Set<string>();
    let current: string[] = [];
    let stage = 0;
    for (const ins of instructions) {
      if (ins.keyword === 'FROM') {
        for (const n of current) finished.add(n);
        const w = ins.args.split(/[ \t]+/).filter((x) => !x.startsWith('--'));
        current = [
          String(stage++),
          ...(w[1]?.toUpperCase() === 'AS' && w[2] ? [w[2].toLowerCase()] : []),
        ];
        const ref = w[0] ?? '';
        if (
          !/^[a-z0-9][a-z0-9._/:@-]*$/.test(ref) ||
          (w.length !== 1 && !(w.length === 3 && w[1]!.toUpperCase() === 'AS'))
        )
          problems.push(
            `Dockerfile line ${ins.line}: FROM ${ins.args.slice(0, 80)} must be one image reference, optionally AS a stage name`,
          );
        if (w[2] && !/^[a-z][a-z0-9_.-]*$/.test(w[2].toLowerCase()))
          problems.push(
            `Dockerfile line ${ins.line}: the stage name ${w[2]} must be letters, digits, - _ .`,
          );
        continue;
      }
      if (ins.keyword === 'ADD')
        problems.push(
          `Dockerfile line ${ins.line}: ADD is not allowed; install what you need with RUN from the base image's packages`,
        );
      if (ins.keyword === 'COPY' && /[$\\"'[]/.test(ins.args))
        problems.push(
          `Dockerfile line ${ins.line}: COPY takes plain paths only (no variables, quotes, escapes or JSON form)`,
        );
      for (const m of ins.args.matchAll(/--(?:from|mount=[^\s]*?\bfrom)=([^\s,]+)/gi)) {
        const from = m[1]!.toLowerCase();
        if (!finished.has(from))
          problems.push(
            `Dockerfile line ${ins.line}: ${ins.keyword} takes files from ${m[1]}, which is not an earlier, finished stage of this Dockerfile`,
          );
      }
      // ONBUILD runs in someone else's build; VOLUME would give the agent disk outside its
      // quota; HEALTHCHECK makes the engine run commands in the container (an exec).
      if (['ONBUILD', 'VOLUME', 'HEALTHCHECK'].includes(ins.keyword))
        problems.push(`Dockerfile line ${ins.line}: ${ins.keyword} is not allowed`);
      // The host keys what it stops and removes on labels of its own (I10): an image may
      // carry none of them, nor a label whose name a variable decides.
      // Quotes and backslashes are taken out first: Docker joins `b\b.slug` and `"b"b.slug`
      // into `bb.slug`.
      if (
        ins.keyword === 'LABEL' &&
        (ins.args.includes('$') || RESERVED_LABEL.test(ins.args.replace(/["'\\]/g, '')))
      )
        problems.push(
          `Dockerfile line ${ins.line}: LABEL may not set bot-bottle's own labels (bb.*, forklift.*) or use a variable`,
        );
    }
    for (const { image, line } of baseImagesOf(instructions)) {
      if (image.includes('$'))
        problems.push(
          `Dockerfile line ${line}: FROM ${image} uses a variable; name the image itself`,
        );
      else if (!ctx.allowedBases.some((b) => sameImage(b, image)))
        problems.push(
          `Dockerfile line ${line}: FROM ${image} is not an allowed base image (allowed: ${ctx.allowedBases.join(', ') || 'none'})`,
        );
    }
  } else {
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch (err) {
      throw new BbError('INVALID_INPUT', `${name} is not JSON: ${(err as Error).message}`);
    }
    if (kind === 'routes') {
      const parsed = RoutesFileSchema.safeParse(raw);
      if (!parsed.success)
        for (const i of parsed.error.issues)
          problems.push(`${name} ${i.path.join('.')}: ${i.message}`);
      else
        for (const [n, r] of parsed.data.routes.entries()) {
          const u = new URL(r.upstream);
          if (u.username || u.password)
            problems.push(
              `${name} routes.${n}.upstream holds credentials in its URL; reference a secret in headers instead`,
            );
          if (u.search)
            problems.push(
              `${name} routes.${n}.upstream has a query string; secrets go in headers, by reference`,
            );
          for (const [h, ref] of Object.entries(r.headers)) {
            if (ref.startsWith('env:') && isReservedSecret(ref.slice(4)))
              problems.push(
                `${name} routes.${n}.headers.${h}: ${ref} is bot-bottle's own secret; it is never sent through a route`,
              );
            if (!ref.startsWith('env:') && !ctx.operator)
              problems.push(
                `${name} routes.${n}.headers.${h}: ${ref} is not allowed in a proposal; reference a secret the operator holds as env:NAME`,
              );
          }
          // Plain HTTP only to this machine; no other scheme at all (the proxy would speak HTTP to it).
          const loopback = ['127.0.0.1', 'localhost', '[::1]'].includes(u.hostname);
          if (u.protocol !== 'https:' && !(u.protocol === 'http:' && loopback))
            problems.push(
              `${name} routes.${n}.upstream: ${r.upstream} must be https:// (plain http:// only to this machine)`,
            );
          if (parsed.data.routes.findIndex((o) => o.prefix === r.prefix) !== n)
            problems.push(`${name} routes.${n}.prefix ${r.prefix} is listed twice`);
        }
    } else {
      const parsed = AllowlistFileSchema.safeParse(raw);
      if (!parsed.success)
        for (const i of parsed.error.issues)
          problems.push(
            `${name} ${i.path.join('.') || '(top)'}: ${i.message}; the file is {"allow": ["host", "*.suffix:443", ...]}`,
          );
      else
        for (const entry of parsed.data.allow) {
          const host = entry.trim().replace(/:\d+$/, '');
          if (host === '*' || host === '*.' || /^\*\.[^.]+$/.test(host))
            problems.push(
              `${name}: ${JSON.stringify(entry)} allows too much; name the hosts (or *.example.com)`,
            );
          else
            try {
              parseRules([entry]);
            } catch (err) {
              problems.push(`${name}: ${(err as Error).message}`);
            }
        }
    }
  }
  if (problems.length)
    throw new BbError('INVALID_INPUT', `the proposed ${name} is refused: ${problems.join('; ')}`, {
      data: { problems },
    });
}
