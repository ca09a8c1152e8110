/** What the CLIs' outputs and configurations have in common. */
import type { TurnInput } from './provider';

/** The sum of the named numeric fields of a usage object, or undefined without one. */
export function usageTokens(usage: unknown, fields: string[]): number | undefined {
  if (typeof usage !== 'object' || usage === null) return undefined;
  const u = usage as Record<string, unknown>;
  const n = fields.reduce((sum, f) => sum + (typeof u[f] === 'number' ? (u[f] as number) : 0), 0);
  return fields.some((f) => typeof u[f] === 'number') ? n : undefined;
}

export const jsonLines = (text: string): Array<Record<string, unknown>> =>
  text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.startsWith('{'))
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as Record<string, unknown>];
      } catch {
        return [];
      }
    });

const forgeServer = (socket: string, input: TurnInput) => ({
  command: 'node',
  args: [`${input.runtimeDir}/bb-forge-mcp.mjs`],
  env: { BB_SIDECAR_SOCKET: socket },
});

/** The MCP servers a bottle's agent has: the forge, and the supervise tools when supervised. */
export const mcpServers = (input: TurnInput) => ({
  ...(input.socket ? { forge: forgeServer(input.socket, input) } : {}),
  ...(input.superviseSocket
    ? {
        supervise: {
          command: 'node',
          args: [`${input.runtimeDir}/bb-supervise-mcp.mjs`],
          env: { BB_SUPERVISE_SOCKET: input.superviseSocket },
        },
      }
    : {}),
});

/**
 * A session id as a CLI names it (a UUID, a thread id), or undefined: the agent can
 * print anything, and the id goes into the bottle's record and the next turn's argv.
 */
export function validSessionId(id: string | undefined): string | undefined {
  return id !== undefined && /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/.test(id) ? id : undefined;
}
