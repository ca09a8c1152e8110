import { anthropicDialect } from './anthropic';
import { chatDialect } from './chat';
import type { Dialect } from './dialect';
import { responsesDialect } from './responses';

export type { Dialect } from './dialect';

/** Every API the scripted model speaks, by the path it answers. */
export const DIALECTS: readonly Dialect[] = [anthropicDialect, responsesDialect, chatDialect];
