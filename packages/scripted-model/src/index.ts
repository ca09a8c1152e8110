/**
 * @module
 * `@bb/scripted-model`: the test double of a model provider. One loopback
 * server speaks the APIs the real agent CLIs call (Anthropic Messages, streamed
 * and plain; OpenAI Responses; OpenAI Chat Completions), answers each request
 * with the next step of a script (tool calls, then a final answer), records
 * every request, and can fail on purpose (an HTTP status, a delay, a cut stream).
 */
export {
  createScriptedModelServer,
  type ModelApi,
  type RecordedRequest,
  type ScriptedModelOptions,
  type ScriptedModelServer,
  type ScriptStep,
  ScriptStepSchema,
  stepIndex,
  type ToolCall,
  ToolCallSchema,
} from './server';
