/** `$BB_HOME`, defaulting to `~/.bot-bottle`: the one rule, in `@bb/names`. */
export { bbHome } from '@bb/names';
