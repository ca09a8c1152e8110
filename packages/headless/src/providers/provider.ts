/** What a provider needs to start one turn of an agent. */
export interface TurnInput {
  prompt: string;
  /** The session to continue; absent on the first turn. Never "the latest": always this id. */
  sessionId?: string | undefined;
  model?: string | undefined;
  /** The agent's home inside the bottle (kept across freeze and rehydrate). */
  home: string;
  /** Where the runtime files (bb-forge, the MCP bridge, the script agent) are mounted. */
  runtimeDir: string;
  /** The forge sidecar's socket inside the bottle; absent: the agent has no forge tools (forklift). */
  socket?: string | undefined;
  /** The supervise sidecar's socket, when the bottle has a supervise plane. */
  superviseSocket?: string | undefined;
  /**
   * The model API as the bottle reaches it: the in-bottle bridge to the
   * credential proxy, which adds the real key. Absent: the CLI's own default.
   */
  modelApi?: { kind: 'anthropic' | 'openai'; baseUrl: string } | undefined;
  /** Model request retries before the turn fails. @default 2 */
  retries?: number | undefined;
}

/** What the CLI sends as its API key: a placeholder the credential proxy replaces. */
export const PROXY_API_KEY = 'bb-credential-proxy-adds-the-key';

/** How to run one turn: argv, environment, and files to place in the agent's home first. */
export interface Invocation {
  cmd: string[];
  env: Record<string, string>;
  /** Paths relative to the home. */
  files: Record<string, string>;
}

export interface TurnResult {
  sessionId: string | undefined;
  ok: boolean;
  /** Why the turn failed, when the CLI said. */
  error?: string;
  /**
   * The input tokens the model read in this turn (cached ones included), when
   * the CLI reports usage: how large the conversation has grown.
   */
  tokens?: number;
}

/** A model API dialect a CLI speaks (the credential proxy routes `/anthropic` and `/openai`). */
export type ModelApiKind = 'anthropic' | 'openai';

/**
 * An agent CLI, headless: how to run one turn of it, and how to read what it
 * printed. Register one with `registerProvider`; manifests (`provider`) and
 * forklift (`--agent`) then take its name. `describeProviderConformance`
 * (`@bb/headless/testing`) checks the promises below.
 */
export interface AgentProvider {
  readonly name: string;
  /**
   * The model APIs the CLI can be pointed at, in the order it prefers them; the
   * bottle routes it to the first one its credential routes offer. Empty: it
   * calls no model (the script agent).
   */
  readonly modelApis: readonly ModelApiKind[];
  /**
   * The turn's command. The prompt is one argv element, as given; a session is
   * resumed by its id only (never "continue the latest").
   */
  invocation(input: TurnInput): Invocation;
  /** What the CLI printed: its session id, whether the turn succeeded (garbled output: not), usage. */
  parseResult(stdout: string, exitCode: number): TurnResult;
}

/** The model API `provider` is pointed at, given the dialects the bottle's routes offer. */
export function modelApiFor(
  provider: AgentProvider,
  offered: (kind: ModelApiKind) => string | undefined,
): { kind: ModelApiKind; baseUrl: string } | undefined {
  for (const kind of provider.modelApis) {
    const baseUrl = offered(kind);
    if (baseUrl) return { kind, baseUrl };
  }
  return undefined;
}
