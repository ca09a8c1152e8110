// The GitHub test server's response templates: GitHub's own examples from its published
// OpenAPI description (@octokit/openapi), one per object the server answers with, with
// GitHub's hosts kept as they are (the server puts its own in). Run with --write to
// update src/testing/github-server/templates.json; the tests check it is current.
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const TEMPLATES_FILE = join(here, '..', 'src', 'testing', 'github-server', 'templates.json');

/** template name → [example name, index into it when it is a list]. */
const FROM: Record<string, [string, number?]> = {
  user: ['simple-user'],
  privateUser: ['private-user'],
  repository: ['full-repository'],
  issue: ['issue'],
  comment: ['issue-comment'],
  label: ['label-items', 0],
  pull: ['pull-request'],
  pullSimple: ['pull-request-simple-items', 0],
  review: ['pull-request-review'],
  reviewComment: ['pull-request-review-comment'],
  reaction: ['reaction'],
  permission: ['repository-collaborator-permission-response-if-user-has-admin-permissions'],
  branch: ['branch-with-protection'],
};

export function githubSpecPath(): string {
  const require = createRequire(import.meta.url);
  return join(
    dirname(require.resolve('@octokit/openapi/package.json')),
    'generated',
    'api.github.com.json',
  );
}

export function extractTemplates(spec: {
  components: { examples: Record<string, { value: unknown }> };
}) {
  const out: Record<string, unknown> = {};
  for (const [name, [example, index]] of Object.entries(FROM)) {
    const value = spec.components.examples[example]?.value;
    if (value === undefined) throw new Error(`GitHub's OpenAPI has no example ${example}`);
    out[name] = index === undefined ? value : (value as unknown[])[index];
  }
  return out;
}

if (process.argv.includes('--write')) {
  const spec = JSON.parse(readFileSync(githubSpecPath(), 'utf8'));
  writeFileSync(TEMPLATES_FILE, `${JSON.stringify(extractTemplates(spec), null, 2)}\n`);
  console.log(`wrote ${TEMPLATES_FILE}`);
}
