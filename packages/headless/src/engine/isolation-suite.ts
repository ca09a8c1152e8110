import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:net';
import { networkInterfaces } from 'node:os';
import { LABEL } from '@bb/names';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Backend, BottleSpec } from './backend';

export interface IsolationConformanceOptions {
  create: () => Backend | Promise<Backend>;
  /** An image with `sh`, `id` and `node`, whose user 1000 exists. */
  image: string;
  /**
   * The calls the backend made to its engine so far (request paths or verbs),
   * so the suite can check none ran a command in a bottle or attached to one.
   * Without it, that test is skipped with the reason.
   */
  engineCalls?: () => string[];
  skip?: { reason: string; tests: string[] };
}

/** What running a command in a bottle, or attaching to one, looks like on an engine's API. */
const INTO_A_BOTTLE = /\/exec\b|\/attach\b|\/portforward\b|pods\/exec|pods\/attach/i;

/**
 * What every backend that says it isolates (`isolates: true`) must prove: the
 * agent's bottle reaches no network (not the host on any of its addresses),
 * runs as the user asked with no capability and no new privileges, on a
 * read-only root with only its tmpfs writable, within exactly its memory and
 * process limits, as the bottle itself reads them (`/proc/self/status`, its
 * cgroup) and as the backend reports them; nothing of the host's environment
 * reaches it; and the backend never runs a command in a bottle or attaches to
 * one. A backend that does not isolate fails the first test.
 */
export function describeIsolationConformance(
  name: string,
  options: IsolationConformanceOptions,
): void {
  describe(`Backend isolation: ${name}`, () => {
    const made: Array<{ backend: Backend; id: string }> = [];
    afterEach(async () => {
      for (const m of made.splice(0)) await m.backend.destroy(m.id).catch(() => {});
    });
    // A service on every address of the host (its loopback, its bridges to containers),
    // which the agent must not reach on any of them.
    let listener: Server;
    let port = 0;
    const hostAddresses = () => [
      '127.0.0.1',
      ...Object.values(networkInterfaces())
        .flat()
        .filter((a) => a !== undefined && a.family === 'IPv4' && !a.internal)
        .map((a) => a!.address),
    ];
    beforeAll(async () => {
      listener = createServer((s) => s.end('reached\n'));
      await new Promise<void>((r) => listener.listen(0, '0.0.0.0', r));
      port = (listener.address() as { port: number }).port;
    });
    afterAll(() => new Promise<void>((r) => listener.close(() => r())));

    const test = (title: string, fn: (skip: (why: string) => never) => Promise<void>) => {
      if (options.skip?.tests.includes(title))
        it.skip(`${title} (skipped: ${options.skip.reason})`, () => {});
      else it(title, (ctx) => fn((why) => ctx.skip(why) as never), 60_000);
    };
    const agent = (script: string, over: Partial<BottleSpec> = {}): BottleSpec => {
      const slug = `iso-${randomUUID().slice(0, 8)}`;
      return {
        name: `bb-${slug}-agent`,
        image: options.image,
        cmd: ['sh', '-c', script],
        user: '1000:1000',
        labels: { [LABEL.slug]: slug, [LABEL.role]: 'agent' },
        network: 'none',
        readOnlyRootfs: true,
        tmpfs: { '/tmp': 'rw,size=16m' },
        resources: { memoryBytes: 64 * 1024 * 1024, pidsLimit: 64 },
        ...over,
      };
    };
    const runToEnd = async (backend: Backend, spec: BottleSpec) => {
      const id = await backend.create(spec);
      made.push({ backend, id });
      await backend.start(id);
      const res = await backend.wait(id, { timeoutMs: 50_000 });
      return { id, ...res, logs: await backend.logs(id), info: (await backend.inspect(id))! };
    };

    test('says it isolates, and applies and reports the hardening it was asked for', async () => {
      const b = await options.create();
      expect(b.isolates, `${b.name} says it does not isolate`).toBe(true);
      // What the bottle's own kernel view says too, not only what the backend reports.
      const r = await runToEnd(
        b,
        agent(
          [
            'id -u',
            'touch /etc/bb-x 2>/dev/null || echo root-read-only',
            'touch /tmp/ok && echo tmp-ok',
            'grep -E "^(CapEff|CapPrm|NoNewPrivs):" /proc/self/status',
            'echo "memory.max $(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"',
            'echo "pids.max $(cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max)"',
          ].join('; '),
        ),
      );
      expect(r.info.isolation).toEqual({
        network: 'none',
        capDrop: ['ALL'],
        noNewPrivileges: true,
        readOnlyRootfs: true,
        user: '1000:1000',
        pidsLimit: 64,
        memoryBytes: 64 * 1024 * 1024,
      });
      expect(r.logs).toMatch(/^1000$/m);
      expect(r.logs).toContain('root-read-only');
      expect(r.logs).toContain('tmp-ok');
      expect(r.logs).toMatch(/^CapEff:\s+0+$/m);
      expect(r.logs).toMatch(/^CapPrm:\s+0+$/m);
      expect(r.logs).toMatch(/^NoNewPrivs:\s+1$/m);
      expect(r.logs).toMatch(new RegExp(`^memory.max ${64 * 1024 * 1024}$`, 'm'));
      expect(r.logs).toMatch(/^pids.max 64$/m);
    });

    test('cannot reach the host on any of its addresses, or anywhere', async () => {
      const b = await options.create();
      const hosts = hostAddresses();
      // One connection to each address; each must fail (refused, unreachable or silent).
      const probe = `const hosts=process.env.HOSTS.split(',');let left=hosts.length;for(const host of hosts){const s=require('net').connect({host,port:${port},timeout:3000});s.on('data',()=>{console.log('reached '+host);process.exit(0)});const no=(why)=>{console.log('no '+host+' '+why);if(--left===0)process.exit(7)};s.on('error',(e)=>no(e.code));s.on('timeout',()=>{s.destroy();no('timeout')})}`;
      const r = await runToEnd(b, agent(`node -e "${probe}"`, { env: { HOSTS: hosts.join(',') } }));
      expect(r.logs).not.toContain('reached');
      for (const h of hosts) expect(r.logs).toContain(`no ${h} `);
      expect(r.exitCode).toBe(7);
    });

    test("nothing of the host's environment reaches the agent", async () => {
      // Set before the backend is made: one that copies the environment early is caught too.
      const canary = `bb-canary-${randomUUID()}`;
      process.env['BB_ISOLATION_CANARY'] = canary;
      try {
        const b = await options.create();
        const r = await runToEnd(b, agent('env', { env: { ASKED_FOR: 'yes' } }));
        expect(r.logs).toContain('ASKED_FOR=yes');
        expect(r.logs).not.toContain(canary);
      } finally {
        delete process.env['BB_ISOLATION_CANARY'];
      }
    });

    test('a memory hog is stopped at its limit and reported as out of memory', async () => {
      const b = await options.create();
      const r = await runToEnd(
        b,
        agent(`node -e "const a=[];for(;;)a.push(Buffer.alloc(8*1024*1024,1))"`),
      );
      expect(r.oomKilled).toBe(true);
      expect(r.exitCode).not.toBe(0);
    });

    test('a fork bomb stays within its process limit', async () => {
      const b = await options.create();
      const r = await runToEnd(
        b,
        agent(
          `node -e "let ok=0;const cp=require('child_process');for(let i=0;i<200;i++){const c=cp.spawn('sleep',['5']);c.on('spawn',()=>ok++);c.on('error',()=>{})}setTimeout(()=>{console.log('children '+ok);process.exit(0)},2000)"`,
          { resources: { pidsLimit: 32, memoryBytes: 64 * 1024 * 1024 } },
        ),
      );
      const n = Number(/children (\d+)/.exec(r.logs)?.[1] ?? Number.NaN);
      expect(n).toBeLessThan(32);
    });

    test('never runs a command in a bottle or attaches to one', async (skip) => {
      if (!options.engineCalls)
        skip('the backend gives no record of its engine calls (engineCalls)');
      const b = await options.create();
      const before = options.engineCalls!().length;
      await runToEnd(b, agent('echo hello'));
      const calls = options.engineCalls!().slice(before);
      expect(calls.length, 'the record of engine calls is empty').toBeGreaterThan(0);
      expect(calls.filter((c) => INTO_A_BOTTLE.test(c))).toEqual([]);
      expect('exec' in b || 'attach' in b, 'the backend offers a way into a bottle').toBe(false);
    });
  });
}
