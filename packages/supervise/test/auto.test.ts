// Auto mode approves on its own only what the analyser calls harmless: a proxy change
// inside the operator's ceiling with nothing above `info`. The rest waits for a person.
import { describe, expect, it } from 'vitest';
import {
  analyse,
  autoApprovable,
  beyondCeiling,
  defaultPolicy,
  type Policy,
  type ProposalKind,
} from '../src/index';

const policy: Policy = {
  ...defaultPolicy(),
  egressCeiling: ['pypi.org', 'files.pythonhosted.org', '127.0.0.1:8080'],
  credentialHosts: { PYPI_TOKEN: ['pypi.org'] },
};
const auto = (kind: ProposalKind, base: string, proposed: string) =>
  autoApprovable({
    kind,
    findings: analyse(kind, base, proposed),
    beyondCeiling: beyondCeiling(kind, base, proposed, policy),
  });
const allow = (...hosts: string[]) => JSON.stringify({ allow: hosts });
const routes = (...r: Array<Record<string, unknown>>) => JSON.stringify({ routes: r });

describe('auto mode', () => {
  it('approves a new host inside the ceiling', () => {
    expect(
      auto('allowlist', allow('registry.npmjs.org'), allow('registry.npmjs.org', 'pypi.org')),
    ).toBe(true);
  });

  it('waits for a person on a host beyond the ceiling, an internal address or a wildcard', () => {
    expect(auto('allowlist', allow(), allow('evil.example.com'))).toBe(false);
    // Inside the ceiling, yet a loopback address: high, so a person looks.
    expect(auto('allowlist', allow(), allow('127.0.0.1:8080'))).toBe(false);
    expect(auto('allowlist', allow(), allow('*.pythonhosted.org'))).toBe(false);
  });

  it('waits for a person on any route change, a key sent further along its own host included', () => {
    const scoped = {
      prefix: '/gl',
      upstream: 'https://gitlab.example.com/api/v4/projects/42',
      headers: { 'private-token': 'env:GL_TOKEN' },
    };
    const wider = { ...scoped, upstream: 'https://gitlab.example.com/' };
    const findings = analyse('routes', routes(scoped), routes(wider));
    expect(findings.map((f) => [f.code, f.severity])).toEqual([['credential-new-path', 'medium']]);
    expect(auto('routes', routes(scoped), routes(wider))).toBe(false);
    // Even a route the analyser has nothing to say about is a person's to approve.
    expect(
      auto(
        'routes',
        routes(scoped),
        routes(scoped, { prefix: '/x', upstream: 'https://pypi.org/simple' }),
      ),
    ).toBe(false);
  });

  it('waits for a person on a route that sends a secret anywhere new', () => {
    const route = {
      prefix: '/pypi',
      upstream: 'https://pypi.org/simple',
      headers: { authorization: 'env:PYPI_TOKEN' },
    };
    expect(auto('routes', routes(), routes(route))).toBe(false);
  });

  it('never rebuilds an image on its own, however plain the Dockerfile', () => {
    expect(
      auto(
        'dockerfile',
        'FROM bb-base:latest\n',
        'FROM bb-base:latest\nRUN apt-get install -y jq\n',
      ),
    ).toBe(false);
  });
});
