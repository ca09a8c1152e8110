import { spawn } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { closeGiteaPools } from '@bb/forge';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { runBbForge } from '../src/bb-forge';
import { ForgeSidecarClient } from '../src/client';
import { METHOD_NAMES, METHODS } from '../src/contract';
import { createForgeMcpServer } from '../src/mcp-bridge';
import { FORGE_PROMPT_OVERLAY } from '../src/prompt';
import { type Harness, startHarness, TOKEN } from './harness';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..');
let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});
afterAll(() => closeGiteaPools());

function io(stdin = '') {
  const out: string[] = [];
  const err: string[] = [];
  return {
    out,
    err,
    io: { out: (s: string) => out.push(s), err: (s: string) => err.push(s), stdin: () => stdin },
  };
}

describe('bb-forge', () => {
  it('reads, comments from stdin, and signals done through the sidecar', async () => {
    h = await startHarness();
    const client = new ForgeSidecarClient({ socketPath: h.env['BB_SIDECAR_SOCKET']! });
    const a = io();
    expect(await runBbForge(['read-issue', '1'], { ...a.io, client })).toBe(0);
    expect(JSON.parse(a.out.join('')).title).toBe('Widget export drops trailing newline');
    const b = io('multi\nline comment\n');
    expect(await runBbForge(['comment', '1', '-'], { ...b.io, client })).toBe(0);
    expect(h.server.issue('acme/widgets', 1).comments[0]!.body).toBe('multi\nline comment\n');
    // reviews of a PR (issue 1 is no PR: refused with the reason)
    const r = io();
    expect(await runBbForge(['reviews', '1'], { ...r.io, client })).toBe(1);
    expect(r.err.join('')).toMatch(/^bb-forge: NOT_FOUND: /);
    const c = io();
    expect(await runBbForge(['done', 'success', 'All good'], { ...c.io, client })).toBe(0);
    await client.close();
  });

  it('exits 1 with the reason when refused, 2 on usage errors', async () => {
    h = await startHarness();
    const client = new ForgeSidecarClient({ socketPath: h.env['BB_SIDECAR_SOCKET']! });
    const a = io();
    expect(await runBbForge(['comment', '2', 'hi'], { ...a.io, client })).toBe(1);
    expect(a.err.join('')).toMatch(/^bb-forge: SCOPE_DENIED: postComment on #2 denied/);
    for (const argv of [
      [],
      ['read-issue'],
      ['read-issue', 'seventeen'],
      ['reviews'],
      ['done', 'great', 'x'],
      ['frobnicate'],
    ]) {
      const u = io();
      expect(await runBbForge(argv, { ...u.io, client }), argv.join(' ')).toBe(2);
    }
    await client.close();
  });

  it('says clearly when there is no sidecar', async () => {
    const a = io();
    const client = new ForgeSidecarClient({
      socketPath: '/nonexistent/forge.sock',
      connectWaitMs: 200,
    });
    expect(await runBbForge(['read-issue', '1'], { ...a.io, client })).toBe(1);
    expect(a.err.join('')).toMatch(
      /FORGE_UNAVAILABLE: cannot reach the forge sidecar at \/nonexistent\/forge.sock/,
    );
  });
});

/** A sidecar (the harness's), its client, and the MCP bridge over it, driven by the MCP SDK's client. */
async function bridged() {
  h = await startHarness();
  const sidecarClient = new ForgeSidecarClient({ socketPath: h.env['BB_SIDECAR_SOCKET']! });
  const server = createForgeMcpServer(sidecarClient);
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await server.connect(serverSide);
  const mcp = new Client({ name: 'test', version: '1.0.0' });
  await mcp.connect(clientSide);
  return { mcp, sidecarClient };
}

describe('MCP bridge, driven by the MCP SDK client', () => {
  it('lists the forge tools and forwards calls, scope errors included', async () => {
    const { mcp, sidecarClient } = await bridged();
    const tools = (await mcp.listTools()).tools.map((t) => t.name).sort();
    expect(tools).toEqual([
      'open_pr',
      'post_comment',
      'push',
      'read_comments',
      'read_issue',
      'read_pr',
      'read_reviews',
      'signal_done',
      'update_description',
    ]);
    const issue = await mcp.callTool({ name: 'read_issue', arguments: { number: 1 } });
    expect(JSON.parse((issue.content as Array<{ text: string }>)[0]!.text).number).toBe(1);
    const denied = await mcp.callTool({
      name: 'post_comment',
      arguments: { number: 2, body: 'x' },
    });
    expect(denied.isError).toBe(true);
    expect((denied.content as Array<{ text: string }>)[0]!.text).toMatch(/^SCOPE_DENIED/);
    const done = await mcp.callTool({
      name: 'signal_done',
      arguments: { status: 'blocked', summary: 'need input' },
    });
    expect(done.isError).toBeFalsy();
    await mcp.close();
    await sidecarClient.close();
  });
});

describe('the contract, written once', () => {
  it('every method is served, bridged with its description, named in the prompt and a bb-forge command', async () => {
    const { mcp, sidecarClient } = await bridged();
    const tools = new Map((await mcp.listTools()).tools.map((t) => [t.name, t]));
    const help = io();
    await runBbForge(['--help'], help.io);
    for (const m of METHOD_NAMES) {
      // Served: a call with a wrong parameter is refused by its own schema, not as unknown.
      await expect(sidecarClient.call(m, { unexpected: 1 })).rejects.toMatchObject({
        code: 'INVALID_INPUT',
      });
      expect(tools.get(m)?.description).toBe(METHODS[m].description);
      expect(FORGE_PROMPT_OVERLAY).toContain(m);
      expect(help.out.join('')).toContain(`  ${METHODS[m].cli.command} `);
    }
    expect([...tools.keys()].sort()).toEqual([...METHOD_NAMES].sort());
    await expect(sidecarClient.call('delete_repo', {})).rejects.toThrow(/not found/i);
    await mcp.close();
    await sidecarClient.close();
  });
});

describe('the bundled sidecar', () => {
  it('runs as a single file with nothing but node, and serves the agent', async () => {
    const bundle = join(pkg, 'dist', 'bundle', 'sidecar.mjs');
    expect(existsSync(bundle), 'build the package first (pnpm build)').toBe(true);
    h = await startHarness();
    // Stop the in-process sidecar; run the bundle on the same configuration instead.
    await h.sidecar.close();
    const stderr: string[] = [];
    const child = spawn(process.execPath, [bundle], {
      env: { PATH: process.env['PATH'], HOME: h.dir, ...h.env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    child.stderr.on('data', (d) => stderr.push(String(d)));
    try {
      const client = new ForgeSidecarClient({ socketPath: h.env['BB_SIDECAR_SOCKET']! });
      for (let i = 0; i < 100 && !existsSync(h.env['BB_SIDECAR_SOCKET']!); i++)
        await new Promise((r) => setTimeout(r, 50));
      expect((await client.readIssue(1)).number).toBe(1);
      await client.close();
    } finally {
      child.kill('SIGTERM');
      await new Promise((r) => child.on('exit', r));
    }
    expect(stderr.join('')).toMatch(/forge sidecar listening/);
    expect(stderr.join('')).toMatch(/shutting down/);
    expect(stderr.join('')).not.toContain(TOKEN);
  });
});

describe('prompt overlay', () => {
  it('names the sidecar operations and signal_done, and no forge in particular', () => {
    for (const word of ['signal_done', 'open_pr', 'post_comment', 'bb-forge'])
      expect(FORGE_PROMPT_OVERLAY).toContain(word);
    expect(FORGE_PROMPT_OVERLAY).not.toMatch(/gitea|github/i);
    writeFileSync('/dev/null', FORGE_PROMPT_OVERLAY);
  });
});
