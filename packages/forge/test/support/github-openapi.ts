// Check GitHub test-server responses against GitHub's own published OpenAPI description
// (@octokit/openapi, api.github.com): each answer against the schema its path, method and
// status document. Formats are not checked (GitHub's examples themselves use loose ones).
import { readFileSync } from 'node:fs';
import Ajv, { type ValidateFunction } from 'ajv';
import { githubSpecPath } from '../../scripts/github-templates';

type Response = { $ref?: string; content?: Record<string, { schema?: unknown }> };
type Op = { responses?: Record<string, Response> };
export const GITHUB_SPEC = JSON.parse(readFileSync(githubSpecPath(), 'utf8')) as {
  paths: Record<string, Record<string, Op>>;
  components: { examples: Record<string, { value: unknown }>; responses: Record<string, Response> };
};

/** OpenAPI 3.0's `nullable: true` as JSON Schema says it: the schema, or null. */
function denullable(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(denullable);
  if (typeof v !== 'object' || v === null) return v;
  const o: Record<string, unknown> = {};
  for (const [k, x] of Object.entries(v))
    if (k !== 'nullable' && k !== 'example' && k !== 'examples') o[k] = denullable(x);
  return (v as { nullable?: boolean }).nullable ? { anyOf: [o, { type: 'null' }] } : o;
}
const SCHEMAS = {
  paths: denullable(GITHUB_SPEC.paths),
  components: {
    schemas: denullable((GITHUB_SPEC.components as unknown as { schemas: unknown }).schemas),
    responses: denullable(GITHUB_SPEC.components.responses),
  },
};

const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
ajv.addSchema(SCHEMAS as object, 'gh');
const cache = new Map<string, ValidateFunction | 'no-body'>();
const pointer = (s: string) => s.replace(/~/g, '~0').replace(/\//g, '~1');

/** Answers GitHub gives that its description leaves out, each with the reason. */
const QUIRKS = [
  {
    method: 'GET',
    template: '/orgs/{org}/members/{username}',
    status: 404,
    why: "an org that does not exist is answered with GitHub's Not Found body",
  },
  ...['/orgs/{org}/installation', '/repos/{owner}/{repo}/installation'].map((template) => ({
    method: 'GET',
    template,
    status: 404,
    why: 'where the App is not installed, GitHub answers its Not Found body',
  })),
];

export function checkAgainstGitHub(
  template: string,
  method: string,
  status: number,
  body: unknown,
): string[] {
  if (QUIRKS.some((q) => q.method === method && q.template === template && q.status === status))
    return [];
  // GitHub's description of this list makes each account a user *and* an enterprise
  // (allOf), where its single installation's says either (anyOf): each item is checked
  // as that endpoint describes one.
  if (
    method === 'GET' &&
    template === '/app/installations' &&
    status === 200 &&
    Array.isArray(body)
  )
    return body.flatMap((i) =>
      checkAgainstGitHub('/app/installations/{installation_id}', 'GET', 200, i),
    );
  const op = GITHUB_SPEC.paths[template]?.[method.toLowerCase()];
  if (!op) return [`${method} ${template} is not in GitHub's API`];
  let response = op.responses?.[String(status)];
  // Every endpoint answers bad credentials (401) and what an App may not do (403,
  // "Resource not accessible by integration") with GitHub's basic error, documented once
  // for the whole API rather than per endpoint.
  if (!response && (status === 401 || status === 403)) {
    const basic = (cache.get('basic-error') ??
      ajv.compile({ $ref: 'gh#/components/schemas/basic-error' })) as ValidateFunction;
    cache.set('basic-error', basic);
    return basic(body)
      ? []
      : [
          `${method} ${template} ${status}: not GitHub's basic error ${JSON.stringify(basic.errors)}`,
        ];
  }
  if (!response) return [`${method} ${template} does not document status ${status}`];
  // A shared response (not_found, validation_failed, ...) is named by reference.
  const shared = response.$ref?.replace('#/components/responses/', '');
  if (shared) response = GITHUB_SPEC.components.responses[shared];
  const key = `${method} ${template} ${status}`;
  let v = cache.get(key);
  if (!v) {
    const json = response?.content?.['application/json'];
    const at = shared
      ? `gh#/components/responses/${encodeURIComponent(pointer(shared))}`
      : `gh#/paths/${encodeURIComponent(pointer(template))}/${method.toLowerCase()}/responses/${status}`;
    v = json?.schema ? ajv.compile({ $ref: `${at}/content/application~1json/schema` }) : 'no-body';
    cache.set(key, v);
  }
  if (v === 'no-body')
    return body === null || body === undefined ? [] : [`${key}: GitHub documents no body`];
  if (v(body)) return [];
  return (v.errors ?? [])
    .slice(0, 6)
    .map((e) => `${key}: ${e.instancePath || '(body)'} ${e.message} ${JSON.stringify(e.params)}`);
}

/**
 * A collector for a test server's `onResponse`: every answer checked as it is given,
 * its problems (and a checker that failed, which is a problem of its own) kept.
 */
export function recordingChecker(): {
  problems: string[];
  record: (x: {
    template: string;
    path: string;
    method: string;
    status: number;
    body: unknown;
  }) => void;
} {
  const problems: string[] = [];
  return {
    problems,
    record: (x) => {
      try {
        for (const p of checkAgainstGitHub(x.template || x.path, x.method, x.status, x.body))
          problems.push(p);
      } catch (err) {
        problems.push(`${x.method} ${x.template}: the checker failed: ${(err as Error).message}`);
      }
    },
  };
}
