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
 * It reads lines as Docker's classic builder does, and refuses whatever the two
 * could read differently: parser directives (`# escape=`, `# syntax=`),
 * heredocs, and whitespace other than spaces and tabs.
 */
export function parseDockerfile(text: string): DockerInstruction[] {
  const out: DockerInstruction[] = [];
  const odd =
    /[^\S \t\r\n]|[\u0000-\u0008\u000e-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/.exec(
      text,
    );
  if (odd)
    throw new BbError(
      'INVALID_INPUT',
      `Dockerfile: character U+${odd[0].charCodeAt(0).toString(16).padStart(4, '0')} at line ${text.slice(0, odd.index).split('\n').length} is not allowed; use spaces and tabs`,
    );
  const lines = text.split('\n').map((l) => l.replace(/\r$/, ''));
  let pending: { text: string; line: number } | undefined;
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i]!;
    const trimmed = raw.replace(/^[ \t]+|[ \t]+$/g, '');
    if (!pending && out.length === 0 && /^#[ \t]*[a-zA-Z]+[ \t]*=/.test(trimmed))
      throw new BbError(
        'INVALID_INPUT',
        `Dockerfile line ${i + 1}: parser directives (${trimmed}) are not allowed`,
      );
    if (trimmed === '' || trimmed.startsWith('#')) continue;
    const text = pending ? `${pending.text} ${trimmed}` : trimmed;
    const start = pending?.line ?? i + 1;
    // Docker continues a line that ends in a backslash followed only by spaces or tabs.
    if (/\\[ \t]*$/.test(raw)) {
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
    if (/<<-?["']?[A-Za-z_]/.test(args) && ['RUN', 'COPY', 'ADD'].includes(keyword))
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
    // Nothing may come from outside the allowed bases: no other image through
    // COPY/ADD --from or RUN --mount from=, no download through ADD.
    const stages = new Set<string>();
    let stage = 0;
    for (const ins of instructions) {
      // A stage may take from those before it (by name or number), not from itself.
      const earlier = new Set(stages);
      if (ins.keyword === 'FROM') {
        const w = ins.args.split(/\s+/).filter((x) => !x.startsWith('--'));
        if (w[1]?.toUpperCase() === 'AS' && w[2]) stages.add(w[2].toLowerCase());
        stages.add(String(stage++));
        continue;
      }
      for (const m of ins.args.matchAll(/--(?:from|mount=[^\s]*?\bfrom)=([^\s,]+)/gi)) {
        const from = m[1]!.toLowerCase();
        if (!earlier.has(from))
          problems.push(
            `Dockerfile line ${ins.line}: ${ins.keyword} takes files from ${m[1]}, which is not an earlier stage of this Dockerfile`,
          );
      }
      if (ins.keyword === 'ADD' && /:\/\/|git@/i.test(ins.args))
        problems.push(
          `Dockerfile line ${ins.line}: ADD from the network is not allowed; install what you need with RUN from the base image's packages`,
        );
      // ONBUILD runs in someone else's build; VOLUME would give the agent disk outside its
      // quota; HEALTHCHECK makes the engine run commands in the container (an exec).
      if (['ONBUILD', 'VOLUME', 'HEALTHCHECK'].includes(ins.keyword))
        problems.push(`Dockerfile line ${ins.line}: ${ins.keyword} is not allowed`);
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
          if (
            Object.keys(r.headers).length &&
            u.protocol === 'http:' &&
            !['127.0.0.1', 'localhost', '[::1]'].includes(u.hostname)
          )
            problems.push(
              `${name} routes.${n}.upstream: a secret goes only over https (${r.upstream})`,
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
