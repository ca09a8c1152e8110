import { errorMessage, isBbError } from '@bb/errors';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import type { ForgeSidecarClient } from './client';

const number = z.number().int().positive().describe('an issue or PR number of this repository');

/**
 * An MCP server exposing the sidecar's operations as tools, so agents that speak
 * MCP (claude, codex) call them natively. Every tool forwards to the sidecar,
 * which enforces scope and logs the call.
 */
export function createForgeMcpServer(client: ForgeSidecarClient, version = '0.0.0'): McpServer {
  const server = new McpServer({ name: 'bot-bottle-forge', version });
  const tool = <S extends z.ZodRawShape>(
    name: string,
    description: string,
    inputSchema: S,
    call: (args: z.infer<z.ZodObject<S>>) => Promise<unknown>,
  ) => {
    server.registerTool(name, { description, inputSchema }, (async (
      args: z.infer<z.ZodObject<S>>,
    ) => {
      try {
        const result = await call(args);
        return { content: [{ type: 'text' as const, text: JSON.stringify(result, null, 2) }] };
      } catch (err) {
        const code = isBbError(err) ? err.code : 'ERROR';
        return {
          isError: true,
          content: [{ type: 'text' as const, text: `${code}: ${errorMessage(err)}` }],
        };
      }
    }) as never);
  };
  tool('read_issue', 'Read an issue (title, body, labels, assignees, state).', { number }, (a) =>
    client.readIssue(a.number),
  );
  tool('read_pr', 'Read a pull request (head, base, merge state).', { number }, (a) =>
    client.readPr(a.number),
  );
  tool('read_comments', 'Read the comments of an issue or PR, oldest first.', { number }, (a) =>
    client.readComments(a.number),
  );
  tool(
    'read_reviews',
    'Read the reviews of a pull request, oldest first: each with its state (approved, changes_requested, commented), its text and its inline comments (file, line, text).',
    { number },
    (a) => client.readReviews(a.number),
  );
  tool(
    'post_comment',
    'Comment on your issue or one of its PRs.',
    { number, body: z.string().min(1) },
    (a) => client.postComment(a.number, a.body),
  );
  tool(
    'update_description',
    'Replace the description of your issue or one of its PRs.',
    { number, body: z.string() },
    (a) => client.updateDescription(a.number, a.body),
  );
  tool(
    'open_pr',
    'Push your committed work and open the pull request for your issue.',
    { title: z.string().min(1), body: z.string().optional(), base: z.string().optional() },
    (a) =>
      client.openPr({
        title: a.title,
        ...(a.body === undefined ? {} : { body: a.body }),
        ...(a.base === undefined ? {} : { base: a.base }),
      }),
  );
  tool('push', 'Push new commits to your pull request branch.', {}, () => client.push());
  tool(
    'signal_done',
    'Say you have finished this unit of work, with a status and a short summary. Then stop.',
    { status: z.enum(['success', 'failure', 'blocked']), summary: z.string().min(1) },
    (a) => client.signalDone(a.status, a.summary),
  );
  return server;
}
