// Each command's usage text, kept apart from the commands so `bb --help` loads nothing else.

export const DEMO_USAGE = `Usage: bb demo [--keep] [--agent script|claude] [--backend docker|local] [--forge gitea|github]

Run the whole bot-bottle story on this machine, narrated, with nothing to set
up: a Gitea-compatible (or, --forge github, GitHub-compatible) test server and
the orchestrator in this process, state in a temporary BB_HOME, and a scripted
agent in a real Docker bottle.

  1. alice files an issue labelled bot-bottle:demo and assigns it to the bot
  2. the webhook launches a bottle; the agent reads the issue, comments,
     commits, opens a PR and signals done; the bottle is frozen
  3. alice comments on the PR; the same agent session resumes and answers
  4. alice merges the PR; the bottle is destroyed
  5. the signed provenance record is shown and verified

When no Docker engine answers (or the base image is missing) the demo says so
and uses the local backend, which does not isolate the agent.

Options:
  --keep              leave the servers up afterwards, print their URLs, and
                      wait for Ctrl-C (then clean up)
  --agent NAME        script (default): the deterministic script agent;
                      claude: the real Claude Code CLI (image bb-agents, from
                      scripts/build-agents-image.sh) driven by a scripted model
                      API, its key held by the credential proxy
  --backend NAME      docker or local (default: docker when available)
  --forge KIND        gitea (default) or github: which forge's test server, API
                      and webhooks the story runs on
  -h, --help          show this help
`;

export const START_USAGE = `Usage: bb start <agent> --headless --prompt TEXT [--bottle B]... [--backend docker|local]

Start a bottle for <agent> (a manifest in $BB_HOME/config/agents), run one turn
with TEXT as the prompt, and freeze the bottle. The agent's output goes to
stdout; the exit code is the agent's.

Options:
  --headless          run without a terminal UI (required: the only mode so far)
  --prompt TEXT       the agent's first prompt
  --bottle B          a bottle manifest to use (repeatable; default: the agent's)
  --backend NAME      docker (default) or local (no isolation; development only)
  --slug S            name the bottle (default <agent>-<5 random characters>)
  -h, --help          show this help
`;

export const RESUME_USAGE = `Usage: bb resume <slug> --headless --prompt TEXT [--backend docker|local]

Rehydrate the frozen bottle <slug> and continue the same agent session with
TEXT as the next prompt. The exit code is the agent's.

Options:
  --headless          run without a terminal UI (required)
  --prompt TEXT       the next prompt
  --backend NAME      docker (default) or local
  -h, --help          show this help
`;

export const ORCHESTRATE_USAGE = `Usage: bb orchestrate <start|resume|status|serve> [options]

Forge-driven bottles, by hand or as a service. State is in $BB_HOME/bot-bottle.db.

  bb orchestrate start --agent A --prompt P [--bottle B]... [--label L]... [--backend B]
      Launch a bottle for the issue the FORGE_* environment names, with its forge
      sidecar, a state row and a signed provenance record; --label puts a forge
      label on the issue. Needs the forge kind's variables (FORGE_KIND, default
      gitea: FORGE_GITEA_API), FORGE_TOKEN, FORGE_OWNER, FORGE_REPO,
      FORGE_ISSUE_NUMBER (FORGE_PR_NUMBER optional).
  bb orchestrate resume --slug S --prompt P [--backend B]
      Continue a frozen forge bottle (needs FORGE_TOKEN again; it is never stored).
  bb orchestrate status [--json]
      The managed bottles: status, issue and PR URLs, the sidecar's last check-in;
      then the events that wait (behind a running turn, for capacity, or parked
      until a bottle claims their PR).
  bb orchestrate serve
      Run the orchestrator (webhooks in, bottles out) until Ctrl-C or SIGTERM.
      Configuration: see docs/orchestrator.md (FORGE_KIND and its variables, FORGE_TOKEN,
      FORGE_WEBHOOK_SECRET, BB_PORT, BB_MEMORY_BUDGET, BB_STARTUP_CONCURRENCY,
      BB_DONE_GRACE, BB_WARM_WINDOW, BB_LEDGER_RETENTION, ...).

Options:
  -h, --help          show this help
`;

export const ORCHESTRATE_START_USAGE = `Usage: bb orchestrate start --agent A --prompt P [--bottle B]... [--label L]... [--container-label K=V]... [--backend B]

Launch a bottle by hand for the issue the FORGE_* environment names, with its forge
sidecar, a state row and a signed provenance record; the agent gets the forge
overlay (how to reach the forge, what it may write) before P. Needs the forge kind's
variables (FORGE_KIND, default gitea: FORGE_GITEA_API), FORGE_TOKEN, FORGE_OWNER,
FORGE_REPO, FORGE_ISSUE_NUMBER (FORGE_PR_NUMBER optional);
FORGE_BOT_LOGIN names the bot (default: the token's user).

Options:
  --agent A              the agent manifest
  --prompt P             what the agent is asked, after the overlay
  --bottle B             a bottle manifest (repeatable; default: the agent's)
  --label L              a forge label put on the issue first, e.g. bot-bottle:A
                         (repeatable), so the issue shows it is being worked on
  --container-label K=V  a label on the bottle's containers (repeatable)
  --backend NAME         docker (default) or local
  -h, --help             show this help
`;

export const ORCHESTRATE_RESUME_USAGE = `Usage: bb orchestrate resume --slug S --prompt P [--backend B]

Continue a frozen forge bottle's session with P (needs FORGE_TOKEN again; it is
never stored). Its checkout first gets what people pushed to its PR branch.

Options:
  --slug S            the bottle (see bb orchestrate status)
  --prompt P          the next prompt
  --backend NAME      docker (default) or local
  -h, --help          show this help
`;

export const ORCHESTRATE_STATUS_USAGE = `Usage: bb orchestrate status [--json]

The managed bottles: status, issue and PR URLs (with the forge configured here), the
sidecar's last check-in; then the events that wait (behind a running turn, for
capacity, or parked until a bottle claims their PR).

Options:
  --json              the stable JSON shape of docs/cli.md
  -h, --help          show this help
`;

export const ORCHESTRATE_SERVE_USAGE = `Usage: bb orchestrate serve

Run the orchestrator (webhooks in, bottles out) until Ctrl-C or SIGTERM. All of its
configuration is environment variables, checked at start: docs/orchestrator.md
(FORGE_KIND and its variables, FORGE_TOKEN, FORGE_WEBHOOK_SECRET,
FORGE_WEBHOOK_SECRET_PREVIOUS, FORGE_RESUME_ON_PUSH, FORGE_MENTION_ONLY, BB_PORT,
BB_MEMORY_BUDGET, ...); setting up Gitea for it: docs/gitea-setup.md; another forge:
docs/guides/writing-a-forge.md.

Each subcommand has its own --help.

Options:
  -h, --help          show this help
`;

export const PROVENANCE_USAGE = `Usage: bb provenance <show|verify> [options]

Signed run records: one per agent turn, chained per bottle.

  bb provenance show <run-id|slug> [--json|--md]
      A run record, or every record of a bottle in order. Terminal text by
      default; --json prints the signed records; --md prints Markdown.
  bb provenance verify <run-id|slug|file> [--key PEM]
      Check signatures, hashes and the chain. A file holds one signed record or a
      JSON array of them (e.g. from GET /api/runs/<id> or bb provenance show --json).
      The keys are every key the fleet trusts (each orchestrator adds its own to
      the state) and this BB_HOME's, unless --key names a public key PEM (GET
      /api/keys). It says which key signed. Exit 0 when valid, 1 when not.

Options:
  -h, --help          show this help
`;

export const USAGE_USAGE = `Usage: bb usage [--since SPAN|DATE] [--json]

What the agents spent: model tokens and estimated cost, summed per day (UTC),
per agent and for the dearest issues, from the run records (each record holds
what its bottle's credential proxy metered, priced from the price table:
$BB_HOME/config/prices.json over the built-in prices).

Options:
  --since SPAN|DATE   from when: 7d, 24h, 90m, 2w, or a date such as 2026-11-01 (default 7d)
  --json              the summary as JSON (what GET /api/usage answers)
  -h, --help          show this help
`;

export const STATE_USAGE = `Usage: bb state migrate [--to postgres://USER:PASSWORD@HOST:PORT/DATABASE] [--from FILE]

Copy this install's state from its SQLite file into an empty PostgreSQL database, so
several orchestrators can share it (then start them with BB_DATABASE_URL set to the
same URL). Stop the orchestrator first: a file it still works on is refused.

Copied, in one transaction (on failure PostgreSQL is left as it was): bottles and
their history, the delivery ledger, the event inbox, signed run records, supervise
requests and their decisions. The SQLite file keeps everything (its schema is brought
up to date, as any bb command does).

Options:
  --to URL      the PostgreSQL database (default $BB_DATABASE_URL, which keeps the
                password out of the process list); migrated first, must hold no rows
  --from FILE   the SQLite file (default $BB_HOME/bot-bottle.db)
  --json        print what was copied as JSON
  -h, --help    show this help
`;

export const DOCTOR_USAGE = `Usage: bb doctor [--backend docker|local|kubernetes] [--json]

Check that this machine (or cluster) can run bottles, and say how to fix what is missing:
  - docker (the default): the engine answers (DOCKER_HOST or the local socket), the
    bottle base image exists (BB_BASE_IMAGE, default bb-base:latest), bottles get
    disks of their own
  - kubernetes (BB_K8S_*, run with the orchestrator's identity): the API server
    answers; the orchestrator may do what bottles need in their namespace and has
    no way into a pod or a Secret (SelfSubjectAccessReview); Pod Security
    "restricted" refuses a privileged pod (a dry run); a probe pod that no policy
    allows cannot connect out (to BB_K8S_PROBE_TARGET, host:port, default the API
    server's service address); the gate's image and each bottle's image run there.
    Probe pods are deleted after
  - the agent and bottle manifests in $BB_HOME/config are valid
  - the orchestrator's configuration is valid (when the forge is configured here)
  - the forge answers with the token's user, the forge kind's own checks (Gitea:
    token scopes, repository admin), and that user is in FORGE_ORG
Exit 0 when every check passes, 1 otherwise.

Options:
  --backend NAME      check this backend instead of BB_BACKEND's (default docker)
  --json              print the checks as JSON: [{ "check", "ok", "detail", "fix" }]
  -h, --help          show this help
`;

export const DESTROY_USAGE = `Usage: bb destroy <slug> [--force] [--backend docker|local]

Remove a bottle: its containers, its disk and its directory. A managed bottle's
state row is marked destroyed (an orchestrator that is running sees it on the
issue's next event). Its provenance records stay.

Options:
  --force             destroy a running bottle too (its agent is stopped; the
                      turn is not recorded)
  --backend NAME      docker (default) or local
  -h, --help          show this help
`;

export const GC_USAGE = `Usage: bb gc [--older-than DURATION] [--dry-run] [--backend docker|local]

Destroy every frozen bottle that has done nothing for DURATION (default 30d):
bottles whose PR was never closed, bottles that asked a question nobody answered,
bottles of bb start. Running bottles are never touched. Provenance records stay.

Options:
  --older-than D      idle for at least D: 14d, 12h, 30m (a unit is required)
  --dry-run           list what would be destroyed, destroy nothing
  --backend NAME      docker (default) or local
  -h, --help          show this help
`;

export const FORGE_USAGE = `Usage: bb forge hook install (--repo owner/name | --org name) --url URL

Create the forge's webhook that feeds the orchestrator, or update the one that
already delivers to URL, signed with FORGE_WEBHOOK_SECRET (Gitea: JSON, events
issues, issue_comment and pull_request, which cover PR comments, reviews and
pushes). The token's user must administer the repository (or own the org).
Needs the forge kind's variables (FORGE_KIND, default gitea: FORGE_GITEA_API),
FORGE_TOKEN and FORGE_WEBHOOK_SECRET. A GitHub App (FORGE_GITHUB_APP_ID and
FORGE_GITHUB_APP_KEY_FILE, no FORGE_TOKEN) has one webhook for every
installation: --repo and --org are not needed, and its events are chosen on
the App's settings page.

Options:
  --repo owner/name   a repository's webhook
  --org name          an organisation's webhook (every repository of it)
  --url URL           where the forge delivers: https://<orchestrator>/webhooks/<kind>
  -h, --help          show this help
`;

export const SUPERVISE_USAGE = `Usage: bb supervise [inbox | list | show | diff | approve | reject | cancel | routes | allowlist]

A stuck agent asks for the configuration it lacks (credential routes, the egress
allowlist or its Dockerfile) with a justification; you decide here. Nobody ever
enters the bottle: the proxies reload in place, or the image is rebuilt and the
agent continues in a new container on the same workspace and session.

  bb supervise                 the inbox (on a terminal; a list otherwise): pending
                               requests with the denial that triggered them, the
                               justification, the diff and the analyser's findings.
                               Keys: up/down choose, a approve, m modify in $EDITOR,
                               r reject with a reason, s scope, o override,
                               PgDn/PgUp (space, b) or J/K scroll the diff, q quit
  bb supervise list [--all | --status S] [--json]
                               requests (default: pending)
  bb supervise show <id> [--json]
                               one request, with its diff, evidence and findings
  bb supervise diff <id>       the unified diff of current vs proposed
  bb supervise approve <id> [--scope turn|bottle|manifest] [--file F]
                               [--expect HASH] [--override] [--write-manifest] [--json]
                               apply it, then tell the agent. --file approves your
                               own version instead (modified). --expect binds the
                               decision to the proposal you reviewed (its hash, as
                               show prints it). --override exceeds the operator's
                               ceiling ($BB_HOME/config/supervise.json). --scope:
                               turn (the default for routes and allowlists) this
                               turn only; bottle (the default, and the only scope,
                               for a rebuilt image) every later turn of this
                               bottle; manifest: also shows the bottle manifest's
                               diff, written with --write-manifest
  bb supervise reject <id> --reason TEXT [--json]
                               the agent is told TEXT verbatim
  bb supervise cancel <id>     withdraw a pending request
  bb supervise routes edit <bottle> [--file F] [--scope turn|bottle] [--override]
  bb supervise allowlist edit <bottle> [--file F] [--scope turn|bottle] [--override]
                               change a running bottle's routes or allowlist
                               yourself ($EDITOR, or --file), applied by the same
                               reload and kept like an approved request (with
                               --server: checked as a proposal, --override for
                               past the ceiling)

Options:
  --server URL        decide at a remote orchestrator (or BB_SUPERVISE_SERVER)
                      through its API, as the operator whose token is in
                      BB_OPERATOR_TOKEN (or --token-file F): bb operator add
                      NAME on its host makes one. Every command and the inbox
                      work the same way; --scope manifest and --write-manifest
                      are for the host
  --by NAME           who decides here (default: BB_OPERATOR, USER)
  -h, --help          show this help

Exit: 0 done; 1 failed (nothing decided, or decided but not applied); 2 usage.
`;

export const OPERATOR_USAGE = `Usage: bb operator add <name> | list [--json] | revoke <name>

Operators' own tokens for the orchestrator's API, kept where the orchestrator
keeps its state: BB_DATABASE_URL's PostgreSQL (a token then works on every
replica), else this BB_HOME. A decision made with one (bb supervise --server URL,
or /api/supervise) is recorded as made by its name, through the API. Only the
token's SHA-256 hash is kept: add prints the token once.

  bb operator add <name>       make a token for <name> (1-39 of a-z 0-9 . _ -) and
                               print it; give it to them as BB_OPERATOR_TOKEN
  bb operator list [--json]    operators, when made, last used, revoked
  bb operator revoke <name>    the token stops working at once

Options:
  -h, --help          show this help

Exit: 0 done; 1 failed (no such operator, one with a token already); 2 usage.
`;

/** A `bb` command: its name, one line for `bb --help`, and its usage (absent: its package prints it). */
export interface CommandInfo {
  name: string;
  summary: string;
  usage?: string;
  /** Usages of its subcommands, shown as its synopses in the docs. */
  subcommands?: string[];
}

/**
 * Every `bb` command, in the order `bb --help` lists them. The help, `bb help
 * <command>` and the command tables of the README and docs/cli.md are made from
 * this (the tables by `pnpm --filter @bb/cli docs`, checked by `npm test`).
 */
export const COMMANDS: readonly CommandInfo[] = [
  {
    name: 'demo',
    summary: 'run the whole story locally, narrated (test forge, orchestrator, a bottle)',
    usage: DEMO_USAGE,
  },
  {
    name: 'start',
    summary: 'start a bottle for an agent and run one headless turn',
    usage: START_USAGE,
  },
  {
    name: 'resume',
    summary: "continue a frozen bottle's session with a new prompt",
    usage: RESUME_USAGE,
  },
  {
    name: 'orchestrate',
    summary: 'forge-driven bottles: start, resume, status, serve (the orchestrator)',
    usage: ORCHESTRATE_USAGE,
    subcommands: [
      ORCHESTRATE_START_USAGE,
      ORCHESTRATE_RESUME_USAGE,
      ORCHESTRATE_STATUS_USAGE,
      ORCHESTRATE_SERVE_USAGE,
    ],
  },
  { name: 'provenance', summary: 'show and verify signed run records', usage: PROVENANCE_USAGE },
  {
    name: 'usage',
    summary: 'what the agents spent: tokens and estimated cost per day, agent and issue',
    usage: USAGE_USAGE,
  },
  {
    name: 'supervise',
    summary: 'decide what stuck agents ask for: routes, allowlist, Dockerfile',
    usage: SUPERVISE_USAGE,
  },
  {
    name: 'operator',
    summary: "operators' own tokens for deciding remotely: add, list, revoke",
    usage: OPERATOR_USAGE,
  },
  {
    name: 'forklift',
    summary: 'sync this fork with its upstream (an agent merges; the host verifies)',
  },
  {
    name: 'destroy',
    summary: 'remove a bottle (containers, disk, directory); records stay',
    usage: DESTROY_USAGE,
  },
  {
    name: 'gc',
    summary: 'destroy frozen bottles idle for a while (default 30 days)',
    usage: GC_USAGE,
  },
  { name: 'forge', summary: 'set up the forge: bb forge hook install', usage: FORGE_USAGE },
  {
    name: 'state',
    summary: 'move state to PostgreSQL: bb state migrate --to postgres://…',
    usage: STATE_USAGE,
  },
  {
    name: 'doctor',
    summary: 'check Docker, the base image, configuration and the forge',
    usage: DOCTOR_USAGE,
  },
];

/** The synopsis lines of a usage text (its `Usage:` block), each as `bb …`. */
export function synopses(usage: string): string[] {
  const block = usage.slice(0, usage.indexOf('\n\n') === -1 ? undefined : usage.indexOf('\n\n'));
  return block
    .split('\n')
    .map((l) => l.replace(/^Usage:\s*/, '').trim())
    .filter(Boolean)
    .map((l) => (l.startsWith('bb ') ? l : `bb ${l}`));
}
