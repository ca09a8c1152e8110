// `bb-orchestrator`: run the orchestrator until SIGTERM or SIGINT.
import { errorMessage } from '@bb/errors';
import { serve } from '@bb/service';

try {
  const running = await serve();
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    process.stderr.write(`bb-orchestrator: ${signal}: stopping (bottles keep running)\n`);
    running.close().then(
      () => process.exit(0),
      (err) => {
        process.stderr.write(`bb-orchestrator: ${errorMessage(err)}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
} catch (err) {
  process.stderr.write(`bb-orchestrator: ${errorMessage(err)}\n`);
  process.exit(1);
}
