import { backendKinds } from '@bb/headless';

// Kubernetes is one of the service's backends (`BB_BACKEND=kubernetes`): a
// platform that runs whole bottles. Its cluster client is loaded only when it is
// used, so a Docker orchestrator never pays for it.
if (!backendKinds.names().includes('kubernetes'))
  backendKinds.registerRunner('kubernetes', async (o) =>
    (await import('@bb/backend-kubernetes')).kubernetesRunnerFromEnv(o),
  );

export { backendKinds };
