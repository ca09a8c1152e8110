import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { providerFor } from '../providers';
import { IN_BOTTLE } from './layout';
import { type BottlePlan, type MountRole, type PlanInput, planBottle } from './plan';

/** Roles holding what only the gate may hold or change: never the agent's. */
const GATE_ONLY: MountRole[] = ['secrets', 'queue', 'state', 'proxy', 'supervise'];

const forge = {
  kind: 'gitea',
  site: { FORGE_GITEA_URL: 'http://127.0.0.1:3000' },
  owner: 'o',
  repo: 'r',
  issue: 7,
  cloneUrl: 'http://127.0.0.1:3000/o/r.git',
};

const inputs = fc.record({
  provider: fc.constantFrom('claude', 'codex', 'pi', 'script'),
  forge: fc.boolean(),
  token: fc.boolean(),
  pr: fc.option(fc.integer({ min: 1, max: 99 }), { nil: undefined }),
  turns: fc.integer({ min: 0, max: 3 }),
  supervise: fc.boolean(),
  allow: fc.array(fc.constantFrom('registry.npmjs.org', 'pypi.org'), { maxLength: 2 }),
  routes: fc.array(fc.constantFrom('anthropic', 'openai'), { maxLength: 2 }),
  mirror: fc.boolean(),
  waiter: fc.boolean(),
  shared: fc.boolean(),
  isolated: fc.boolean(),
  envSecret: fc.constant('sk-live-must-not-appear'),
});

type Drawn = typeof inputs extends fc.Arbitrary<infer T> ? T : never;

function input(x: Drawn): PlanInput {
  return {
    meta: {
      slug: 'claude-abcde',
      image: 'bb-agents:1',
      sessionId: x.turns > 0 ? 'sess-1' : null,
      forge: x.forge ? { ...forge, ...(x.pr ? { pr: x.pr } : {}) } : null,
      turns: Array.from({ length: x.turns }, (_, i) => ({
        turn: i + 1,
        prompt: 'p',
        exitCode: 0,
        ok: true,
        startedAt: '',
        finishedAt: '',
      })),
      branch: 'bb/claude-7',
    },
    agent: { model: 'm' },
    provider: providerFor(x.provider),
    bottles: [{ env: { LANG: 'C' }, resources: {} }],
    prompt: 'fix the bug',
    config: {
      routes: JSON.stringify({
        routes: [...new Set(x.routes)].map((k) => ({
          prefix: `/${k}`,
          upstream: `https://api.${k}.com`,
          headers: { 'x-api-key': 'env:MODEL_KEY' },
        })),
      }),
      allowlist: JSON.stringify({ allow: x.allow }),
      dockerfile: 'FROM bb-agents:1\n',
    },
    inside: IN_BOTTLE,
    forgeToken: x.token,
    supervise: x.supervise
      ? { allowedBases: ['bb-agents:1'], ttlMs: 1, waitMs: 1, coolDownAfter: 1, coolDownMs: 1 }
      : undefined,
    sharedSockets: x.shared,
    isolated: x.isolated,
    mirror: x.mirror,
    turns: x.waiter,
  };
}

/** Every absolute path a plan's container is told of, in its variables. */
const pathsIn = (env: Record<string, string>) =>
  Object.entries(env)
    .filter(([k, v]) => v.startsWith('/') && !k.startsWith('FORGE_GITEA'))
    .map(([k, v]) => [k, v] as const);

const under = (path: string, mounts: BottlePlan['agent']['mounts']) =>
  mounts.find((m) => path === m.target || path.startsWith(`${m.target}/`));

describe('planBottle', () => {
  it('gives the agent nothing of the gate: no secret, no gate-only mount, no writable view of its configuration', () => {
    fc.assert(
      fc.property(inputs, (x) => {
        const plan = planBottle(input(x));
        const roles = plan.agent.mounts.map((m) => m.role);
        for (const r of GATE_ONLY) expect(roles).not.toContain(r);
        for (const m of plan.agent.mounts)
          if (['runtime', 'currentConfig', 'mirror', 'turns'].includes(m.role))
            expect(m.readOnly, m.role).toBe(true);
        // A plan holds references to secrets, never a value: nothing secret is in it to leak.
        expect(JSON.stringify(plan)).not.toContain('sk-live');
        expect(plan.agent.env['FORGE_TOKEN_FILE']).toBeUndefined();
        expect(Object.keys(plan.agent.env).some((k) => k.startsWith('FORGE_'))).toBe(false);
      }),
    );
  });

  it('has a gate exactly when something needs one, serving what the bottle needs and mounting what it serves', () => {
    fc.assert(
      fc.property(inputs, (x) => {
        const plan = planBottle(input(x));
        const forgeServed = x.forge && x.token;
        // A supervised bottle runs its proxies with nothing allowed yet, where they are its
        // only way out (an isolating backend): an approval reloads them.
        const proxies = x.allow.length > 0 || x.routes.length > 0 || (x.supervise && x.isolated);
        expect(!!plan.gate).toBe(forgeServed || x.supervise || proxies);
        if (!plan.gate) return;
        expect(plan.gate.serves).toEqual({ forge: forgeServed, supervise: x.supervise, proxies });
        expect(!!plan.secrets['token']).toBe(forgeServed);
        expect(!!plan.secrets['keys.json']).toBe(proxies);
        // Only the forge and the proxies reach out.
        expect(plan.gate.network).toBe(forgeServed || proxies ? 'host' : 'none');
        // The agent's traffic goes to its proxies exactly when they run.
        expect(plan.agent.env['HTTPS_PROXY'] !== undefined).toBe(proxies);
        // A supervised agent's bash says which tool asks for a missing command.
        expect(plan.agent.env['BASH_ENV'] !== undefined).toBe(x.supervise);
        // Every path the gate is told of is in something it mounts (or its own /tmp).
        for (const [k, v] of pathsIn(plan.gate.env))
          if (!v.startsWith('/tmp')) expect(under(v, plan.gate.mounts), `${k}=${v}`).toBeDefined();
        // Its forge calls go through node's own HTTP client (undici's would cost ~20 MB a gate).
        expect(plan.gate.env['BB_FORGE_HTTP_CLIENT']).toBe(forgeServed ? 'node' : undefined);
        // The workspace is the agent's: the gate only reads it.
        const ws = plan.gate.mounts.find((m) => m.role === 'workspace');
        if (ws) expect(ws.readOnly).toBe(true);
      }),
    );
  });

  it('points the agent at the model only through its credential proxy, in an API its CLI speaks', () => {
    fc.assert(
      fc.property(inputs, (x) => {
        const plan = planBottle(input(x));
        const text = JSON.stringify(plan.agent);
        expect(text).not.toContain('api.anthropic.com');
        expect(text).not.toContain('api.openai.com');
        for (const [k, v] of pathsIn(plan.agent.env))
          expect(under(v, plan.agent.mounts), `${k}=${v}`).toBeDefined();
        if (x.allow.length > 0 || x.routes.length > 0)
          expect(plan.agent.env['HTTPS_PROXY']).toMatch(/^http:\/\/127\.0\.0\.1:/);
      }),
    );
  });

  it('resumes the exact session it was given, never "the last one"', () => {
    const plan = planBottle(input({ ...fc.sample(inputs, 1)[0]!, provider: 'claude', turns: 2 }));
    expect(plan.turn).toBe(3);
    expect(plan.agent.cmd).toContain('sess-1');
    expect(plan.agent.cmd).not.toContain('--continue');
  });

  it("tells every provider's agent its manifest's promptOverlay after the prompt, on every turn", () => {
    fc.assert(
      fc.property(inputs, (x) => {
        const base = input(x);
        const overlay = 'Always run the linter before you push.';
        const plan = planBottle({ ...base, agent: { ...base.agent, promptOverlay: overlay } });
        // Where each CLI takes its prompt from: its argv, or a file written for it.
        const told = JSON.stringify([plan.agent.cmd, plan.agent.files, plan.agent.env]);
        expect(told).toContain(JSON.stringify(`fix the bug\n\n${overlay}`).slice(1, -1));
        expect(JSON.stringify(planBottle(base).agent)).not.toContain(overlay);
      }),
    );
  });
});
