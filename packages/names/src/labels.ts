/**
 * The labels bot-bottle puts on what it makes: on containers (and pods, volumes,
 * images), the keys below; on forge issues, the prefixes that target an agent.
 */
export const LABEL = {
  /** The bottle a container belongs to. */
  slug: 'bb.slug',
  /** What a container is in its bottle (agent, gate, build, ...). */
  role: 'bb.role',
  /** Who made it (`orchestrator` for the service's bottles). */
  managedBy: 'bb.managed-by',
  /** The bot-bottle version that made it. */
  version: 'bb.version',
  /** A network namespace holder's bottle. */
  netns: 'bb.netns',
  /** The BB_HOME that made it (a second install on one engine leaves the first's alone). */
  home: 'bb.home',
  /** An image built for a supervise request. */
  superviseRequest: 'bb.supervise-request',
} as const;

export type LabelKey = (typeof LABEL)[keyof typeof LABEL];

/** The service's bottles carry this label (`bb orchestrate status` lists them). */
export const MANAGED_LABEL = { [LABEL.managedBy]: 'orchestrator' } as const;

/** An issue labelled `bot-bottle:<agent>` (and assigned to the bot) launches `<agent>`. */
export const AGENT_LABEL_PREFIX = 'bot-bottle:';
/** An issue labelled `bot-bottle-bottle:<bottle>` runs its agent in that bottle manifest. */
export const BOTTLE_LABEL_PREFIX = 'bot-bottle-bottle:';
