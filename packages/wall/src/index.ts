/**
 * @module
 * `@bb/wall`: how the host crosses a bottle's wall without trusting what is on
 * the other side.
 *
 * The agent owns every byte of its workspace and home: any name there may be a
 * symlink, any `.git` may carry hooks, configuration and attributes that make
 * git run programs or send data elsewhere. Everything bot-bottle does on the
 * host side (and in the forge sidecar, which holds the token) goes through this
 * package:
 *
 * - files below a bottle directory are read and written without following a
 *   symlink anywhere on the way ({@link writeFileNoFollow}, {@link readFileNoFollow});
 * - the agent's commits are read as data, by git running in a repository of
 *   ours with a fixed configuration ({@link importHead}, {@link logPatchAsData});
 * - child processes get a minimal environment ({@link minimalEnv}), never the
 *   orchestrator's;
 * - text the agent wrote is shown as data in every medium ({@link forTerminal},
 *   {@link jsonText}, {@link forHtml}, {@link forMarkdown}, {@link forLog}).
 */

export { minimalEnv, SAFE_PATH } from './env';
export {
  diskUsage,
  ensureBareRepo,
  type ImportOptions,
  importHead,
  isSha,
  type LogAsDataOptions,
  logPatchAsData,
  makeReaderRepo,
  type PatchAsData,
  type RunGitOptions,
  readBranchAsData,
  readHeadAsData,
  runGit,
  setRef,
  type WallGitOptions,
  wallGitEnv,
  withAlternates,
  workspaceObjects,
} from './git';
export {
  chownTreeNoFollow,
  listNoFollow,
  lstatNoFollow,
  mkdirNoFollow,
  type Owner,
  openNoFollow,
  type ReadOptions,
  readFileNoFollow,
  type WriteOptions,
  writeFileNoFollow,
} from './safe-fs';
export { listenUnixSocket } from './socket';
export {
  forHtml,
  forLog,
  forMarkdown,
  forTerminal,
  forTerminalDeep,
  forTerminalLine,
  hasUnprintable,
  jsonText,
  markdownFence,
  UNPRINTABLE,
} from './text';
