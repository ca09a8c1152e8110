import { BbError } from '@bb/errors';
import { claudeProvider } from './claude';
import { codexProvider } from './codex';
import { piProvider } from './pi';
import type { AgentProvider } from './provider';
import { scriptProvider } from './script';

// The built-ins are imported here, not registered by their own modules: whoever asks
// for a provider has them, however a bundler trims what it thinks unused.
const registry = new Map<string, AgentProvider>(
  [claudeProvider, codexProvider, piProvider, scriptProvider].map((p) => [p.name, p]),
);

/**
 * Make `provider` available by its name (an agent manifest's `provider`,
 * forklift's `--agent`). A name already taken is refused, so a provider cannot
 * be replaced behind the back of the one who registered it.
 */
export function registerProvider(provider: AgentProvider): AgentProvider {
  if (!/^[a-z][a-z0-9-]{0,31}$/.test(provider.name))
    throw new BbError(
      'INVALID_INPUT',
      `provider name ${JSON.stringify(provider.name)} must be lower-case letters, digits and hyphens`,
    );
  if (registry.has(provider.name))
    throw new BbError('CONFLICT', `a provider named ${provider.name} is already registered`);
  registry.set(provider.name, provider);
  return provider;
}

/** `a, b, c or d`: the names as a sentence says them. */
export function namesInWords(names: readonly string[]): string {
  return names.length < 2 ? names.join('') : `${names.slice(0, -1).join(', ')} or ${names.at(-1)}`;
}

/** The names of the registered providers, in the order they were registered. */
export function providerNames(): string[] {
  return [...registry.keys()];
}

/** The registered provider `name`; `INVALID_INPUT` naming the ones there are otherwise. */
export function providerFor(name: string): AgentProvider {
  const p = registry.get(name);
  if (!p)
    throw new BbError(
      'INVALID_INPUT',
      `unknown agent provider ${JSON.stringify(name)}: use ${namesInWords(providerNames())}`,
    );
  return p;
}
