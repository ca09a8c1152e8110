/**
 * @module
 * `@bb/names`: the names bot-bottle spells once and every package reads: the
 * labels on containers and issues, the rule for agent, bottle and slug names,
 * and where things live under `BB_HOME`.
 */
export { bbHome, type HomeLayout, homeLayout } from './home';
export {
  AGENT_LABEL_PREFIX,
  BOTTLE_LABEL_PREFIX,
  LABEL,
  type LabelKey,
  MANAGED_LABEL,
} from './labels';
export { isName, NAME_PATTERN, NAME_RULE } from './name';
