/**
 * What a refused request tells the agent: why, and how to ask for the change
 * (the supervise tool to call and the file to start from). The body is JSON so
 * an agent can act on it; the first line of `message` reads on its own.
 */
export const DENIAL_FIX = {
  egress: {
    tool: 'pipelock-block',
    command: '$BB_SUPERVISE pipelock-block',
    file: '/etc/bot-bottle/current-config/allowlist.json',
  },
  credential: {
    tool: 'cred-proxy-block',
    command: '$BB_SUPERVISE cred-proxy-block',
    file: '/etc/bot-bottle/current-config/routes.json',
  },
} as const;

export interface Denial {
  error: 'egress_denied' | 'no_credential_route';
  message: string;
  host?: string;
  port?: number;
  path?: string;
  reason: string;
  fix: { tool: string; command: string; file: string; how: string };
}

export function denialBody(
  kind: keyof typeof DENIAL_FIX,
  what: { host?: string; port?: number; path?: string },
  reason: string,
): string {
  const fix = DENIAL_FIX[kind];
  const target =
    kind === 'egress'
      ? `egress to ${what.host}:${what.port}`
      : `no credential route for ${what.path}`;
  const body: Denial = {
    error: kind === 'egress' ? 'egress_denied' : 'no_credential_route',
    message: `${target} denied: ${reason}`,
    ...what,
    reason,
    fix: {
      ...fix,
      how: `if the task needs it, call the ${fix.tool} tool (or run ${fix.command}) with the whole new file, starting from ${fix.file}, and a justification; the operator decides`,
    },
  };
  return `${JSON.stringify(body)}\n`;
}
