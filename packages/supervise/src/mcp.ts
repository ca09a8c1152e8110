import { errorMessage, isBbError } from '@bb/errors';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { SuperviseClient } from './client';
import {
  CURRENT_CONFIG_DIR,
  KIND_NAMES,
  KINDS,
  TOOL_ARGS,
  type ToolAnswer,
  WaitArgs,
} from './contract';

/** How long one tool call may wait, in all, before answering `pending`: safe for every MCP client. */
export const MCP_WAIT_MS = 45_000;
/** A progress notification goes out this often while a call waits. */
const SLICE_MS = 5_000;

interface Extra {
  _meta?: { progressToken?: string | number };
  signal?: AbortSignal;
  sendNotification?: (n: {
    method: 'notifications/progress';
    params: Record<string, unknown>;
  }) => Promise<void>;
}

/**
 * The supervise tools as an MCP server (stdio inside the bottle), forwarding to
 * the bottle's supervise sidecar. A call waits for the operator up to
 * `waitMs`, sending progress notifications, then answers `pending` with the
 * request id for `supervise_wait`.
 */
export function createSuperviseMcpServer(
  client: SuperviseClient,
  options: {
    waitMs?: number;
    /** How often progress goes out while a call waits. @default 5 s */
    sliceMs?: number;
    version?: string;
  } = {},
): McpServer {
  const server = new McpServer({
    name: 'bot-bottle-supervise',
    version: options.version ?? '0.0.0',
  });
  const total = options.waitMs ?? MCP_WAIT_MS;
  const slice = options.sliceMs ?? SLICE_MS;
  const answer = (a: ToolAnswer) => ({
    content: [{ type: 'text' as const, text: JSON.stringify(a, null, 2) }],
  });
  const failed = (err: unknown) => ({
    isError: true,
    content: [
      {
        type: 'text' as const,
        text: `${isBbError(err) ? err.code : 'ERROR'}: ${errorMessage(err)}`,
      },
    ],
  });
  const waitOut = async (first: () => Promise<ToolAnswer>, extra: Extra) => {
    const started = Date.now();
    let a = await first();
    let n = 0;
    while (a.status === 'pending' && Date.now() - started < total && !extra.signal?.aborted) {
      const token = extra._meta?.progressToken;
      if (token !== undefined && extra.sendNotification)
        await extra
          .sendNotification({
            method: 'notifications/progress',
            params: {
              progressToken: token,
              progress: ++n,
              message: `waiting for the operator (${a.request_id})`,
            },
          })
          .catch(() => {});
      a = await client.wait(a.request_id, Math.min(slice, total - (Date.now() - started)));
    }
    return a;
  };
  for (const kind of KIND_NAMES) {
    const k = KINDS[kind];
    server.registerTool(
      k.tool,
      {
        description: `Use when ${k.when}. Propose the whole new ${k.file} (start from ${CURRENT_CONFIG_DIR}/${k.file}) with a justification; the operator approves, edits or rejects it. On approval ${k.applies}. Never put a secret in it: reference secrets as env:NAME.`,
        inputSchema: TOOL_ARGS[k.tool].shape,
      },
      (async (args: Record<string, string>, extra: Extra) => {
        try {
          return answer(
            await waitOut(() => client.propose(k.tool, args, Math.min(slice, total)), extra),
          );
        } catch (err) {
          return failed(err);
        }
      }) as never,
    );
  }
  server.registerTool(
    'supervise_wait',
    {
      description:
        'Keep waiting for the operator to decide a request you made (by its request_id). Answers pending again after a while; call it again then.',
      inputSchema: { request_id: WaitArgs.shape.request_id },
    },
    (async (args: { request_id: string }, extra: Extra) => {
      try {
        return answer(
          await waitOut(() => client.wait(args.request_id, Math.min(slice, total)), extra),
        );
      } catch (err) {
        return failed(err);
      }
    }) as never,
  );
  return server;
}
