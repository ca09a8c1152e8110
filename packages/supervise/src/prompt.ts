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

/**
 * A bash start-up file (`BASH_ENV` in a supervised bottle): a command that is not
 * there still fails as bash fails it (status 127), and says which tool asks for
 * it to be installed.
 */
export const COMMAND_NOT_FOUND_HINT = `# bot-bottle: what a missing command means in this bottle.
command_not_found_handle() {
  printf 'bash: %s: command not found\\n' "$1" >&2
  printf 'bot-bottle: to have it installed, propose a Dockerfile that adds it with capability-block (start from ${CURRENT_CONFIG_DIR}/Dockerfile; $BB_SUPERVISE capability-block --file FILE --why TEXT, or the MCP tool of that name)\\n' >&2
  return 127
}
`;
