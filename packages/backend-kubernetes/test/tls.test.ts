// The API server over https, as a real cluster serves it: the orchestrator verifies its
// certificate against the CA that BB_K8S_CA names, and refuses a server whose
// certificate that CA did not sign. Certificates are made here with openssl.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { kubernetesRunnerFromEnv } from '../src/from-env';
import { KubernetesBottles, kubeConfigFor } from '../src/kubernetes-bottles';
import { FakeKubernetesApi, publishedSchemas } from '../src/testing/index';

const dir = mkdtempSync(join(tmpdir(), 'bb-k8s-tls-'));
const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });

/** A CA, and a certificate for 127.0.0.1 it signed: its files' paths. */
function authority(name: string) {
  ssl(
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    `${name}-ca.key`,
    '-out',
    `${name}-ca.pem`,
    '-days',
    '2',
    '-subj',
    `/CN=${name} CA`,
  );
  ssl(
    'req',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:P-256',
    '-nodes',
    '-keyout',
    `${name}-server.key`,
    '-out',
    `${name}-server.csr`,
    '-subj',
    '/CN=127.0.0.1',
  );
  writeFileSync(join(dir, `${name}.ext`), 'subjectAltName=IP:127.0.0.1\n');
  ssl(
    'x509',
    '-req',
    '-in',
    `${name}-server.csr`,
    '-CA',
    `${name}-ca.pem`,
    '-CAkey',
    `${name}-ca.key`,
    '-CAcreateserial',
    '-out',
    `${name}-server.pem`,
    '-days',
    '2',
    '-extfile',
    `${name}.ext`,
  );
  return {
    ca: join(dir, `${name}-ca.pem`),
    key: readFileSync(join(dir, `${name}-server.key`), 'utf8'),
    cert: readFileSync(join(dir, `${name}-server.pem`), 'utf8'),
  };
}

let api: FakeKubernetesApi;
let ours: ReturnType<typeof authority>;
let other: ReturnType<typeof authority>;
beforeAll(async () => {
  ours = authority('cluster');
  other = authority('elsewhere');
  api = await FakeKubernetesApi.start({ check: publishedSchemas, tls: ours });
});
afterAll(async () => {
  await api.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('the Kubernetes API over https', () => {
  it("is reached with the cluster's CA and refused with any other (or none)", async () => {
    expect(api.url).toMatch(/^https:/);
    const list = (ca?: string) =>
      new KubernetesBottles({
        kubeConfig: kubeConfigFor(api.url, 'token', ca ? readFileSync(ca, 'utf8') : undefined),
        namespace: 'bots',
      }).list();
    expect(await list(ours.ca)).toEqual([]);
    for (const ca of [other.ca, undefined]) {
      const err = await list(ca).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Error);
      expect((err as { code?: string }).code).toBe('BACKEND_UNAVAILABLE');
    }
  });

  it('takes the CA from BB_K8S_CA, and says what is wrong with a bad one before anything is made', () => {
    const env = (over: Record<string, string>) => ({
      BB_HOME: dir,
      BB_K8S_GATE_IMAGE: 'bb-gate:1',
      BB_K8S_STATE_CLAIM: 'bb-bottles',
      BB_K8S_API: api.url,
      ...over,
    });
    const runner = (e: Record<string, string>) =>
      kubernetesRunnerFromEnv({ env: e, token: 't', warmMs: 0 } as Parameters<
        typeof kubernetesRunnerFromEnv
      >[0]);
    expect(() => runner(env({ BB_K8S_CA: ours.ca }))).not.toThrow();
    expect(() => runner(env({ BB_K8S_CA: join(dir, 'missing.pem') }))).toThrow(
      /BB_K8S_CA .*missing\.pem cannot be read/,
    );
    writeFileSync(join(dir, 'junk.pem'), 'not a certificate\n');
    expect(() => runner(env({ BB_K8S_CA: join(dir, 'junk.pem') }))).toThrow(
      /is not a PEM certificate/,
    );
    const { BB_K8S_API: _, ...noApi } = env({ BB_K8S_CA: ours.ca });
    expect(() => runner(noApi)).toThrow(/BB_K8S_CA is set but BB_K8S_API is not/);
  });
});
