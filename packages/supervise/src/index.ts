/**
 * @module
 * `@bb/supervise`: the supervise plane. A stuck agent proposes the whole routes
 * file, allowlist or Dockerfile it needs (`cred-proxy-block`, `pipelock-block`,
 * `capability-block`) to its bottle's supervise sidecar, which validates it and
 * hands it to the host; the operator decides on the host (`SuperviseDesk`); the
 * proxies reload in place or the image is rebuilt. Nothing ever enters the bottle.
 */

export { analyse, autoApprovable, type Finding } from './analyse';
export {
  type ApiCaller,
  ApproveBody,
  createSuperviseApi,
  EditBody,
  RejectBody,
  SUPERVISE_API,
} from './api';
export { BB_SUPERVISE_USAGE, runBbSupervise } from './bb-supervise';
export { beyondCeiling } from './ceiling';
export { SuperviseClient, type SuperviseClientOptions } from './client';
export {
  CHANNELS,
  CURRENT_CONFIG_DIR,
  classifyFile,
  type DecisionChannel,
  type DecisionFile,
  type DecisionScope,
  KIND_NAMES,
  KINDS,
  kindOfTool,
  type ProposalKind,
  printable,
  REQUEST_ID,
  type RequestFile,
  type RequestStatus,
  SCOPES,
  sha256,
  TOOL_ARGS,
  TOOL_NAMES,
  type ToolAnswer,
  type ToolName,
  UNPRINTABLE,
} from './contract';
export {
  type AuditEntry,
  CURRENT_CONFIG,
  type Decider,
  type Decision,
  type DecisionOutcome,
  EXCHANGE,
  type Remediator,
  type RequestView,
  SuperviseDesk,
  type SuperviseDeskOptions,
  type SupervisedBottles,
} from './desk';
export { Exchange } from './exchange';
export { runSuperviseFromEnv } from './main';
export { defaultPolicy, loadPolicy, type Policy, PolicySchema, policyPath } from './policy';
export { type Approval, type DeskPort, type ListFilter, localDesk } from './port';
export { COMMAND_NOT_FOUND_HINT, SUPERVISE_PROMPT_OVERLAY } from './prompt';
export { RemoteDesk, type RemoteDeskOptions } from './remote';
export { type RunningSuperviseServer, serveSupervise } from './server';
export { SuperviseSidecar, type SuperviseSidecarOptions } from './sidecar';
export {
  decisionValues,
  type Evidence,
  type IngestExtra,
  ingestValues,
  type Remediation,
  type RequestDecision,
  type RequestFilter,
  type Row,
  requestFromRow,
  type SuperviseRecords,
  type SuperviseRequest,
  SuperviseStore,
  streakOf,
} from './store';
export { AllowlistFileSchema, baseImagesOf, parseDockerfile, validateProposal } from './validate';
