// The supervise plane's own surfaces, played by a hostile agent in a real bottle: its
// socket answers only its own methods (nothing a JavaScript object inherits), and a
// proposal that names an internal address in another spelling is shown to the
// operator as what it is, never as "a new host" a busy operator waves through.
import { supervisedBottles } from '@bb/headless';
import { defaultPolicy, SuperviseDesk, SuperviseStore } from '@bb/supervise';
import { probeDocker } from '@bb/tooling/docker';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedTeam } from './harness';

const docker = await probeDocker();

/**
 * A raw JSON-RPC call on the supervise socket from inside the bottle; its answer on stdout.
 * The gate starts beside the agent, so it first waits for the socket (as the real client does).
 */
const rpc = (method: string) =>
  `i=0; while [ ! -S /run/bb/supervise.sock ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; node -e "const r=require('http').request({socketPath:'/run/bb/supervise.sock',path:'/rpc',method:'POST'},s=>{let b='';s.on('data',d=>b+=d);s.on('end',()=>console.log(b))});r.end(JSON.stringify({jsonrpc:'2.0',id:1,method:process.argv[1],params:{x:1}}))" '${method}'`;

describe.skipIf(!docker.ok)("red team: the supervise plane's own surfaces", () => {
  const rt = new RedTeam();
  beforeAll(() => rt.start());
  afterAll(() => rt.stop());

  it('the socket dispatches its own methods only', async () => {
    const names = ['constructor', 'toString', 'valueOf', 'hasOwnProperty', '__proto__', 'config'];
    const run = await rt.launch([names.map((m) => ({ do: 'sh', cmd: rpc(m) }))]);
    const answers = run.steps.map(
      (s) => JSON.parse(String(s['stdout'])) as Record<string, unknown>,
    );
    for (const [i, m] of names.slice(0, -1).entries()) {
      expect(answers[i]!['result'], m).toBeUndefined();
      expect((answers[i]!['error'] as { code: number }).code, m).toBe(-32601);
    }
    // The attack reached the socket: its own method answers.
    expect(answers.at(-1)!['result']).toBeDefined();
  });

  it('an internal address in another spelling is shown to the operator as internal', async () => {
    const spellings = ['127.1:8080', '0x7f000001', '2130706433', '[::1]:443', '127.0.0.1.nip.io'];
    const file = JSON.stringify({ allow: spellings });
    await rt.launch([
      [
        { do: 'write', path: 'allow.json', content: file },
        {
          do: 'sh',
          cmd: "node /opt/bb/bb-supervise.mjs pipelock-block --file allow.json --why 'the docs mirror lives on these hosts, please allow them' --wait 0",
          mayFail: true,
        },
      ],
    ]);
    const desk = new SuperviseDesk({
      store: new SuperviseStore(rt.db),
      bottles: supervisedBottles(rt.env),
      policy: defaultPolicy(),
    });
    const [r] = await desk.list({ status: 'pending' });
    expect(r?.kind).toBe('allowlist');
    for (const s of spellings) {
      const mine = r!.findings.filter((f) => f.message.includes(s));
      expect(
        mine.map((f) => f.code),
        s,
      ).toContain('internal-address');
      expect(
        mine.map((f) => f.code),
        s,
      ).not.toContain('host-new');
    }
  });
});
