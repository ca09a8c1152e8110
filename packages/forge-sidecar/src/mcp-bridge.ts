import { errorMessage, isBbError } from '@bb/errors';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { ForgeSidecarClient } from './client';
import { METHOD_NAMES, METHODS } from './contract';

/**
 * An MCP server exposing the sidecar's methods as tools, so agents that speak
 * MCP (claude, codex) call them natively: one tool per method of the contract,
 * with its description and parameter schema. Every tool forwards to the
 * sidecar, which checks the parameters again, enforces scope and logs the call.
 */
export function createForgeMcpServer(client: ForgeSidecarClient, version = '0.0.0'): McpServer {
  const server = new McpServer({ name: 'bot-bottle-forge', version });
  for (const name of METHOD_NAMES) {
    const { description, params } = METHODS[name];
    server.registerTool(name, { description, inputSchema: params.shape }, (async (
      args: Record<string, unknown>,
    ) => {
      try {
        const result = await client.call(name as string, args);
        return { content: [{ type: 'text' as const, text: JSON.stringify(result, null, 2) }] };
      } catch (err) {
        const code = isBbError(err) ? err.code : 'ERROR';
        return {
          isError: true,
          content: [{ type: 'text' as const, text: `${code}: ${errorMessage(err)}` }],
        };
      }
    }) as never);
  }
  return server;
}
