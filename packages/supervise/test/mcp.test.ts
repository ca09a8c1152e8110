// The MCP tools as a real MCP client sees them: the schemas it is offered, progress
// notifications while a call waits for the operator, `pending` with the request id
// when the wait runs out, and the decision through supervise_wait.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { InMemoryTransport } from '@modelcontextprotocol/sdk/inMemory.js';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  Exchange,
  type RunningSuperviseServer,
  SuperviseClient,
  SuperviseSidecar,
  serveSupervise,
} from '../src/index';
import { createSuperviseMcpServer } from '../src/mcp';

describe('supervise over MCP', () => {
  let root: string;
  let server: RunningSuperviseServer;
  let mcp: Client;
  let client: SuperviseClient;

  beforeEach(async () => {
    root = mkdtempSync(join(tmpdir(), 'bb-supervise-mcp-'));
    mkdirSync(join(root, 'config'));
    writeFileSync(join(root, 'config', 'allowlist.json'), '{"allow": []}\n');
    server = await serveSupervise(
      new SuperviseSidecar({
        slug: 'b1',
        dir: join(root, 'ex'),
        currentConfig: join(root, 'config'),
        allowedBases: [],
        pollMs: 10,
      }),
      join(root, 's.sock'),
    );
    client = new SuperviseClient({ socketPath: join(root, 's.sock') });
    const tools = createSuperviseMcpServer(client, { waitMs: 1200, sliceMs: 300 });
    const [a, b] = InMemoryTransport.createLinkedPair();
    await tools.connect(a);
    mcp = new Client({ name: 'test', version: '0' });
    await mcp.connect(b);
  });
  afterEach(async () => {
    await mcp.close();
    await client.close();
    await server.close();
    rmSync(root, { recursive: true, force: true });
  });

  const text = (r: unknown) =>
    JSON.parse((r as { content: Array<{ text: string }> }).content[0]!.text);

  it('offers the three tools and supervise_wait with their schemas', async () => {
    const { tools } = await mcp.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([
      'capability-block',
      'cred-proxy-block',
      'pipelock-block',
      'supervise_wait',
    ]);
    const allow = tools.find((t) => t.name === 'pipelock-block')!;
    expect(allow.inputSchema.required).toEqual(['allowlist', 'justification']);
    expect(allow.description).toContain('/etc/bot-bottle/current-config/allowlist.json');
  });

  it('sends progress while it waits, answers pending, and supervise_wait returns the decision', async () => {
    const progress: unknown[] = [];
    const first = await mcp.callTool(
      {
        name: 'pipelock-block',
        arguments: { allowlist: '{"allow": ["pypi.org"]}', justification: 'pip needs pypi.org' },
      },
      undefined,
      { onprogress: (p) => progress.push(p), timeout: 10_000 },
    );
    const pending = text(first);
    expect(pending).toMatchObject({ status: 'pending', kind: 'allowlist' });
    expect(progress.length).toBeGreaterThanOrEqual(2);
    expect(progress[0]).toMatchObject({
      progress: 1,
      message: expect.stringContaining(pending.request_id),
    });
    // The operator decides (as the host does, through the exchange).
    new Exchange(join(root, 'ex')).writeDecision({
      id: pending.request_id,
      status: 'rejected',
      reason: 'Use the vendored wheels.',
      decidedAt: new Date().toISOString(),
    });
    const decided = await mcp.callTool({
      name: 'supervise_wait',
      arguments: { request_id: pending.request_id },
    });
    expect(text(decided)).toMatchObject({ status: 'rejected', reason: 'Use the vendored wheels.' });
  });

  it('a refused proposal is a tool error the model reads, not a crash', async () => {
    const r = await mcp.callTool({
      name: 'pipelock-block',
      arguments: { allowlist: '{"allow": ["*"]}', justification: 'everything please' },
    });
    expect(r.isError).toBe(true);
    expect((r.content as Array<{ text: string }>)[0]!.text).toMatch(
      /^INVALID_INPUT: .*allows too much/,
    );
  });
});
