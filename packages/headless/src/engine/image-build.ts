/**
 * Building a bottle's image from a Dockerfile an agent proposed (and an operator
 * approved): on a Docker engine of its own when the build is to be bounded while
 * it runs (build-engine.ts), else on the bottle's engine; then the checks an image
 * must pass (its size, no volumes) on the bottle's engine.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BbError, isBbError } from '@bb/errors';
import { baseImagesOf, parseDockerfile } from '@bb/supervise';
import type Docker from 'dockerode';
import pkg from '../../package.json' with { type: 'json' };
import { type BuildImageOptions, VERSION_LABEL } from './backend';
import { type BuildEngine, canBuildBounded, copyImage, startBuildEngine } from './build-engine';
import {
  BUILD_PROXY_ARGS,
  type BuildNetwork,
  canIsolateBuilds,
  startBuildNetwork,
} from './build-network';

/**
 * Build `dockerfile` as `tag` for the engine `main` (`Backend.buildImage`); `error`
 * turns an engine's failure into the backend's error.
 */
export async function buildImageOn(
  main: Docker,
  dockerfile: string,
  tag: string,
  options: BuildImageOptions,
  error: (err: unknown) => Error,
): Promise<void> {
  const limits = {
    memoryBytes: options.limits?.memoryBytes ?? 2 * 1024 ** 3,
    cpus: options.limits?.cpus ?? 1,
    timeoutMs: options.limits?.timeoutMs ?? 15 * 60_000,
    maxImageBytes: options.limits?.maxImageBytes ?? 16 * 1024 ** 3,
    diskBytes: options.limits?.diskBytes,
    pidsLimit: options.limits?.pidsLimit ?? 1024,
  };
  // The Dockerfile alone is the context: nothing of the host's goes into the build.
  const context = mkdtempSync(join(tmpdir(), 'bb-build-'));
  let engine: BuildEngine | undefined;
  let net: BuildNetwork | undefined;
  try {
    writeFileSync(join(context, 'Dockerfile'), dockerfile);
    // Bounded while it runs: on an engine and a filesystem of its own (build-engine.ts).
    if (limits.diskBytes !== undefined && process.env['BB_BUILD_BOUNDED'] !== 'off') {
      if (!canBuildBounded())
        throw new BbError(
          'BACKEND_ERROR',
          `building ${tag}: a rebuild runs what an agent wrote, bounded while it runs (disk, processes), which needs root and dockerd on this machine; run the orchestrator as root with Docker installed, or set BB_BUILD_BOUNDED=off to build on the engine with memory and time limits only`,
        );
      const network = process.env['BB_BUILD_NETWORK'] ?? 'none';
      if (network !== 'none')
        throw new BbError(
          'INVALID_INPUT',
          `building ${tag}: BB_BUILD_NETWORK=${network} names a network of the engine, which a bounded build's own engine does not have; unset it (no network), or set BB_BUILD_BOUNDED=off as well`,
        );
      const bases = [...new Set(baseImagesOf(parseDockerfile(dockerfile)).map((b) => b.image))];
      let baseBytes = 0;
      for (const b of bases)
        baseBytes += (
          await main
            .getImage(b)
            .inspect()
            .catch(() => ({ Size: 0 }))
        ).Size;
      const dir = join(
        options.workDir ?? join(tmpdir(), 'bb-builds'),
        `${Date.now()}-${process.pid}-${Math.random().toString(16).slice(2, 8)}`,
      );
      // The steps reach the hosts allowed through the proxy, and nothing else (build-network.ts).
      if (options.egress?.length) {
        if (!canIsolateBuilds())
          throw new BbError(
            'BACKEND_ERROR',
            `building ${tag}: its steps' network (${options.egress.join(', ')}) needs a network namespace of their own, which needs root and ip (iproute2); run the orchestrator as root, or empty buildRegistries in the supervise policy for no network`,
          );
        net = await startBuildNetwork({
          dir: join(dir, 'net'),
          allow: options.egress,
          ...(options.onProgress ? { onProgress: options.onProgress } : {}),
        });
      }
      engine = await startBuildEngine({
        dir,
        ...(net ? { netns: net.netns } : {}),
        // Its layers are stored unpacked (the base's size), then what the steps may write.
        diskBytes: Math.ceil(baseBytes * 1.1) + limits.diskBytes + 256 * 1024 ** 2,
        pidsLimit: limits.pidsLimit,
        memoryBytes: limits.memoryBytes,
        ...(options.onProgress ? { onProgress: options.onProgress } : {}),
      });
      for (const b of bases) {
        options.onProgress?.(`copying ${b} into the build engine`);
        await copyImage(main, engine.docker, b);
      }
    } else if (limits.diskBytes !== undefined)
      options.onProgress?.(
        'BB_BUILD_BOUNDED=off: this build is bounded in memory and time only, not in disk',
      );
    await runBuild(engine?.docker ?? main, context, tag, {
      labels: { ...options.labels, [VERSION_LABEL]: pkg.version },
      // Steps in the engine's namespace, where the proxy is all there is.
      ...(net ? { network: 'host', buildargs: BUILD_PROXY_ARGS } : {}),
      limits,
      cgroupParent: engine?.cgroupParent,
      onTimeout: () => engine?.killSteps(),
      ...(options.onProgress ? { onProgress: options.onProgress } : {}),
      error: (err) => error(err),
    });
    if (engine) {
      options.onProgress?.(`copying ${tag} out of the build engine`);
      await copyImage(engine.docker, main, tag);
    }
    // An image that declares volumes would give its containers disk outside their quota.
    const info = await main.getImage(tag).inspect();
    const volumes = Object.keys(info.Config?.Volumes ?? {});
    const refused =
      info.Size > limits.maxImageBytes
        ? `the image is ${Math.round(info.Size / 1024 ** 2)} MiB, over the ${Math.round(limits.maxImageBytes / 1024 ** 2)} MiB a bottle's image may take`
        : volumes.length
          ? `the image declares volumes (${volumes.join(', ')}), which bottles may not have`
          : undefined;
    if (refused) {
      await main
        .getImage(tag)
        .remove({ force: true })
        .catch(() => {});
      throw new BbError('INVALID_INPUT', `building ${tag}: ${refused}`);
    }
  } catch (err) {
    // A step that failed for want of a host says which host it was refused.
    const refused = net?.refused();
    if (refused?.count && isBbError(err))
      throw new BbError(
        err.code,
        `${err.message}\nthe build's proxy refused ${refused.count} connection${refused.count === 1 ? '' : 's'}, to ${refused.some.join(', ')}${refused.some.length < refused.count ? ' among others' : ''} (not in the bottle's allowlist or the operator's buildRegistries)`,
      );
    throw err;
  } finally {
    try {
      await engine?.close();
    } finally {
      await net?.close();
      rmSync(context, { recursive: true, force: true });
    }
  }
}

/**
 * One build through an engine's API: the classic builder, no network unless the
 * operator names one, the steps' memory and CPU bounded, stopped at its time
 * limit (the stream cut and `onTimeout` called, which kills the steps), and its
 * tag removed when it fails.
 */
async function runBuild(
  docker: Docker,
  context: string,
  tag: string,
  o: {
    labels: Record<string, string>;
    /** The steps' network mode. @default BB_BUILD_NETWORK, or none */
    network?: string;
    buildargs?: Record<string, string>;
    limits: { memoryBytes: number; cpus: number; timeoutMs: number };
    cgroupParent?: string | undefined;
    onTimeout?: () => void;
    onProgress?: (line: string) => void;
    error: (err: unknown) => Error;
  },
): Promise<void> {
  let stream: NodeJS.ReadableStream;
  try {
    stream = await docker.buildImage({ context, src: ['Dockerfile'] }, {
      t: tag,
      labels: o.labels,
      rm: true,
      forcerm: true,
      // No network for RUN steps unless the operator names one (or the build has its proxy).
      networkmode: o.network ?? process.env['BB_BUILD_NETWORK'] ?? 'none',
      ...(o.buildargs ? { buildargs: o.buildargs } : {}),
      // The classic builder: the one the Dockerfile was checked against.
      version: '1',
      // Bounded like a bottle: the steps run what the agent wrote.
      memory: o.limits.memoryBytes,
      memswap: o.limits.memoryBytes,
      cpuperiod: 100_000,
      cpuquota: Math.round(o.limits.cpus * 100_000),
      ...(o.cgroupParent ? { cgroupparent: o.cgroupParent } : {}),
    } as Docker.ImageBuildOptions);
  } catch (err) {
    throw o.error(err);
  }
  const lines: string[] = [];
  // A build that runs past its time is stopped, and leaves nothing behind.
  const timer = setTimeout(() => {
    o.onTimeout?.();
    (stream as unknown as { destroy?: (e?: Error) => void }).destroy?.(
      new BbError(
        'TIMEOUT',
        `building ${tag} took longer than ${Math.round(o.limits.timeoutMs / 1000)} s`,
      ),
    );
  }, o.limits.timeoutMs);
  await new Promise<void>((resolve, reject) => {
    stream.on('error', reject);
    docker.modem.followProgress(
      stream,
      (err: Error | null, out: Array<{ error?: string; errorDetail?: { message?: string } }>) => {
        const failed = err ?? out.find((e) => e.error);
        if (!failed) return resolve();
        const why = err ? err.message : (failed as { error: string }).error;
        reject(
          new BbError(
            'INVALID_INPUT',
            `building ${tag} failed: ${why}\n${lines.slice(-15).join('')}`,
          ),
        );
      },
      (ev: { stream?: string; status?: string }) => {
        const line = ev.stream ?? (ev.status ? `${ev.status}\n` : '');
        if (!line) return;
        // The last lines only, each cut: a step that prints without end costs nothing here.
        lines.push(line.length > 2000 ? `${line.slice(0, 2000)}…\n` : line);
        if (lines.length > 15) lines.shift();
        o.onProgress?.(line.trimEnd());
      },
    );
  })
    .finally(() => clearTimeout(timer))
    .catch(async (err) => {
      await docker
        .getImage(tag)
        .remove({ force: true })
        .catch(() => {});
      throw err;
    });
}
