/**
 * The agent CLIs bot-bottle runs, each a provider registered by name (claude,
 * codex, pi and the script agent come built in; `registerProvider` adds one).
 */
export { claudeProvider } from './claude';
export { codexProvider } from './codex';
export { validSessionId } from './common';
export { piProvider } from './pi';
export {
  type AgentProvider,
  type Invocation,
  type ModelApiKind,
  modelApiFor,
  PROXY_API_KEY,
  type TurnInput,
  type TurnResult,
} from './provider';
export { namesInWords, providerFor, providerNames, registerProvider } from './registry';
export { scriptProvider } from './script';
