// The script a scripted model plays: its steps, and what a request it received looks like.
import { z } from 'zod';

/** A tool call the scripted model makes. Names are the CLI's own (`Bash`, `mcp__forge__signal_done`, `exec_command`, `bash`). */
export const ToolCallSchema = z
  .object({
    name: z.string().min(1),
    input: z.record(z.string(), z.unknown()).default({}),
    /** OpenAI Responses only: the namespace of an MCP tool, e.g. `mcp__forge` (Codex). */
    namespace: z.string().optional(),
  })
  .strict();
export type ToolCall = z.infer<typeof ToolCallSchema>;

/**
 * One model response. `say` alone ends the agent's turn; `tools` asks the CLI to
 * run tools and come back with their results. `fail` answers with that HTTP
 * status instead (every time this step is asked for, so retries fail too);
 * `cut` starts a streamed answer and drops the connection. `delayMs` waits first.
 */
export const ScriptStepSchema = z
  .object({
    say: z.string().optional(),
    tools: z.array(ToolCallSchema).optional(),
    fail: z.number().int().min(400).max(599).optional(),
    cut: z.literal(true).optional(),
    delayMs: z.number().int().min(0).max(600_000).optional(),
    /** The tokens this answer reports (as the API's usage). @default 12 in, 7 out */
    usage: z
      .object({
        input: z.number().int().min(0).optional(),
        output: z.number().int().min(0).optional(),
        cacheRead: z.number().int().min(0).optional(),
        cacheWrite: z.number().int().min(0).optional(),
      })
      .strict()
      .optional(),
  })
  .strict()
  .refine((s) => s.say !== undefined || s.tools?.length || s.fail || s.cut, {
    message: 'a step needs say, tools, fail or cut',
  });
export type ScriptStep = z.input<typeof ScriptStepSchema>;
export type Step = z.output<typeof ScriptStepSchema>;

export type ModelApi = 'anthropic-messages' | 'openai-responses' | 'openai-chat';

/** One request the server received, for assertions. */
export interface RecordedRequest {
  api: ModelApi;
  path: string;
  headers: Record<string, string>;
  body: Record<string, unknown>;
  /** The session the request belongs to (from the CLI's session headers), or `anonymous`. */
  session: string;
  /** Which script step answered it: the number of model responses already in its history. */
  step: number;
  stream: boolean;
  status: number;
}
