import { CURRENT_CONFIG_DIR, KIND_NAMES, KINDS } from './contract';

/**
 * What an agent in a supervised bottle is told of the supervise tools, added to
 * its first prompt: when each one helps, what it takes, and how to call it
 * with or without MCP tools. Generated from the tools' own table.
 */
export const SUPERVISE_PROMPT_OVERLAY = `
When the environment itself stops you, ask for the change instead of working around it:
${KIND_NAMES.map((k) => `- ${KINDS[k].tool}: when ${KINDS[k].when}. Propose the whole new ${KINDS[k].file}.`).join('\n')}
- "command not found", a missing library or header, or a package manager that cannot reach its registry is a capability-block (or a pipelock-block for the registry's host).
Start from the current files in ${CURRENT_CONFIG_DIR}/ and give a short justification. A person decides; an approved change applies in this same turn (a rebuilt image continues this conversation). Call the MCP tools of those names, or the \`$BB_SUPERVISE\` command if you have no MCP tools (\`$BB_SUPERVISE <tool> --file FILE --why TEXT\`; \`$BB_SUPERVISE --help\`). Never try to reach the network or the host another way.
`;
