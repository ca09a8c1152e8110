// The GitHub test server's response templates: GitHub's own examples from its published
// OpenAPI description (@octokit/openapi), one per object the server answers with, and the
// webhook deliveries it makes from @octokit/webhooks-examples, with GitHub's hosts kept as
// they are (the server puts its own in). Run with --write to
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
  app: ['integration'],
  installation: ['base-installation'],
  installationToken: ['installation-token'],
  hookConfig: ['webhook-config'],
};

export function githubSpecPath(): string {
  const require = createRequire(import.meta.url);
  return join(
    dirname(require.resolve('@octokit/openapi/package.json')),
    'generated',
    'api.github.com.json',
  );
}

/** The webhook deliveries the server makes, by event and action (the first must have an example), from @octokit/webhooks-examples. */
const WEBHOOKS: Record<string, string[]> = {
  issues: [
    'opened',
    'edited',
    'closed',
    'reopened',
    'labeled',
    'unlabeled',
    'assigned',
    'unassigned',
  ],
  issue_comment: ['created'],
  pull_request: ['opened', 'edited', 'closed', 'reopened', 'synchronize', 'labeled', 'assigned'],
  pull_request_review: ['submitted'],
};

/** The objects of webhook payloads the server shapes from the union of GitHub's examples (of which events). */
const OBJECTS: Record<string, string> = {
  issue: 'issues',
  comment: 'issue_comment',
  repository: '*',
  pull_request: 'pull_request',
  simple_pull_request: '*',
  review: 'pull_request_review',
  label: '*',
  user: '*',
};
/** Where the schema of each object is: an event, an action, the payload's key. */
const SCHEMA_OF: Record<string, [string, string, string]> = {
  issue: ['issues', 'opened', 'issue'],
  comment: ['issue_comment', 'created', 'comment'],
  repository: ['issues', 'opened', 'repository'],
  pull_request: ['pull_request', 'opened', 'pull_request'],
  review: ['pull_request_review', 'submitted', 'review'],
  simple_pull_request: ['pull_request_review', 'submitted', 'pull_request'],
};

type JsonSchema = {
  $ref?: string;
  allOf?: JsonSchema[];
  required?: string[];
  properties?: Record<string, JsonSchema>;
};
/** The keys a property of a schema requires (through $ref and allOf). */
function requiredOf(
  root: { definitions: Record<string, JsonSchema> },
  schema: JsonSchema | undefined,
  prop: string,
): string[] {
  const resolve = (s: JsonSchema | undefined): JsonSchema[] => {
    if (!s) return [];
    if (s.$ref) return resolve(root.definitions[s.$ref.replace('#/definitions/', '')]);
    return [s, ...(s.allOf ?? []).flatMap(resolve)];
  };
  const at = resolve(schema).flatMap((s) => resolve(s.properties?.[prop]));
  return [...new Set(at.flatMap((s) => s.required ?? []))];
}

export function webhookSchemaPath(): string {
  const require = createRequire(import.meta.url);
  return join(dirname(require.resolve('@octokit/webhooks-schemas/package.json')), 'schema.json');
}
const isObj = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

export function webhookExamplesPath(): string {
  const require = createRequire(import.meta.url);
  return join(
    dirname(require.resolve('@octokit/webhooks-examples/package.json')),
    'api.github.com',
    'index.json',
  );
}

export function extractTemplates(
  spec: { components: { examples: Record<string, { value: unknown }> } },
  webhooks: Array<{ name: string; examples: Array<{ action?: string }> }>,
  schemas: { definitions: Record<string, JsonSchema> },
) {
  const out: Record<string, unknown> = {};
  const hooks: Record<string, unknown> = {};
  for (const [event, actions] of Object.entries(WEBHOOKS))
    for (const action of actions) {
      const example = webhooks
        .find((w) => w.name === event)
        ?.examples.find((e) => e.action === action);
      // Not every action has an example; the event's first one stands for the others.
      if (example) hooks[`${event}$${action}`] = example;
      else if (action === actions[0])
        throw new Error(`@octokit/webhooks-examples has no ${event}$${action}`);
    }
  out['webhooks'] = hooks;
  // Every object of a kind as the union of every example's (some examples are older
  // than GitHub's schema and lack keys it now requires).
  const objects: Record<string, Record<string, unknown>> = {};
  const merge = (a: unknown, b: unknown): unknown => {
    if (!isObj(a) || !isObj(b)) return a === undefined || a === null ? b : a;
    const o: Record<string, unknown> = { ...b, ...a };
    for (const k of Object.keys(o)) o[k] = merge(a[k], b[k]);
    return o;
  };
  for (const w of webhooks)
    for (const e of w.examples as Array<Record<string, unknown>>)
      for (const [k, v] of Object.entries(e)) {
        const kind =
          k === 'sender'
            ? 'user'
            : k === 'pull_request' && w.name.startsWith('pull_request_review')
              ? 'simple_pull_request'
              : k;
        // A comment is an issue comment here, a PR a pull_request event's, a review a review event's.
        const from = OBJECTS[kind];
        if (from && (from === '*' || from === w.name) && isObj(v))
          objects[kind] = merge(objects[kind], v) as Record<string, unknown>;
      }
  // What GitHub's schema requires of each that no example has: null (or an empty reactions rollup).
  for (const [kind, [event, action, prop]] of Object.entries(SCHEMA_OF)) {
    const obj = objects[kind];
    if (!obj) continue;
    for (const key of requiredOf(schemas, schemas.definitions[`${event}$${action}`], prop))
      if (!(key in obj))
        obj[key] = key === 'reactions' ? (objects['issue']?.['reactions'] ?? null) : null;
  }
  out['webhookObjects'] = objects;
  for (const [name, [example, index]] of Object.entries(FROM)) {
    const value = spec.components.examples[example]?.value;
    if (value === undefined) throw new Error(`GitHub's OpenAPI has no example ${example}`);
    out[name] = index === undefined ? value : (value as unknown[])[index];
  }
  return out;
}

if (process.argv.includes('--write')) {
  const spec = JSON.parse(readFileSync(githubSpecPath(), 'utf8'));
  const webhooks = JSON.parse(readFileSync(webhookExamplesPath(), 'utf8'));
  const schemas = JSON.parse(readFileSync(webhookSchemaPath(), 'utf8'));
  writeFileSync(TEMPLATES_FILE, `${JSON.stringify(extractTemplates(spec, webhooks, schemas))}\n`);
  console.log(`wrote ${TEMPLATES_FILE}`);
}
