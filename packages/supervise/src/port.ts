import type { DecisionScope, ProposalKind, RequestStatus } from './contract';
import type { Decider, Decision, DecisionOutcome, RequestView, SuperviseDesk } from './desk';
import type { SuperviseRequest } from './store';

/** An approval as a client asks for it: who decides is the port's to say, not the caller's. */
export type Approval = Omit<Decision, 'by' | 'via'>;

/** What `bb supervise` lists: pending by default, one status, or all. */
export interface ListFilter {
  status?: RequestStatus | undefined;
  slug?: string | undefined;
}

/**
 * The operator's desk as a client uses it, wherever the desk is: this
 * `BB_HOME`'s (`localDesk`) or a remote orchestrator's (`RemoteDesk`, over
 * `/api/supervise`). Who decides is bound when the port is made: locally the
 * operator's name and the command or inbox it came through; remotely the name
 * the orchestrator knows the token by.
 */
export interface DeskPort {
  /** Where decisions land: `this BB_HOME` or the orchestrator's URL. */
  readonly where: string;
  list(filter?: ListFilter): Promise<RequestView[]>;
  show(id: string): Promise<RequestView>;
  approve(id: string, a: Approval): Promise<DecisionOutcome>;
  reject(id: string, reason: string): Promise<SuperviseRequest>;
  cancel(id: string): Promise<SuperviseRequest>;
  /** The file a bottle runs with now (empty when it has none). */
  current(slug: string, kind: Exclude<ProposalKind, 'dockerfile'>): Promise<string>;
  /** The operator's own change to a bottle's routes or allowlist (see `SuperviseDesk.operatorEdit`). */
  edit(
    slug: string,
    kind: Exclude<ProposalKind, 'dockerfile'>,
    text: string,
    scope: DecisionScope,
    o?: { override?: boolean },
  ): Promise<DecisionOutcome>;
}

/** A port over a desk in this process, deciding as `who`. */
export function localDesk(desk: SuperviseDesk, who: Decider, where = 'this BB_HOME'): DeskPort {
  return {
    where,
    list: async (f = {}) =>
      desk.list({
        ...(f.status ? { status: f.status } : {}),
        ...(f.slug ? { slug: f.slug } : {}),
      }),
    show: async (id) => desk.show(id),
    approve: (id, a) => desk.approve(id, { ...a, ...who }),
    reject: async (id, reason) => desk.reject(id, reason, who),
    cancel: async (id) => desk.cancel(id, who),
    current: async (slug, kind) => desk.current(slug, kind),
    edit: (slug, kind, text, scope, o) => desk.operatorEdit(slug, kind, text, who, scope, o),
  };
}
