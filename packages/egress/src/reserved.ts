/**
 * Whether an environment variable is one of bot-bottle's own secrets (the forge
 * token and everything of the forge's, the webhook secret, the operator's API
 * token): those are never handed to a bottle's proxies, whatever a routes file says.
 */
export function isReservedSecret(name: string): boolean {
  return (
    /^FORGE_/.test(name) ||
    name === 'BB_API_TOKEN' ||
    // An operator's own token for the orchestrator's API (bb supervise --server).
    name === 'BB_OPERATOR_TOKEN' ||
    name === 'BB_WEBHOOK_SECRET' ||
    // forklift's forge token: the host's push and PR alone.
    name === 'FORKLIFT_TOKEN'
  );
}
