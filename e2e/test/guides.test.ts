// Every TypeScript block of docs/ and docs/guides/ compiles against the published packages: a
// guide promises code a third party can start from. What a guide leaves to its
// reader (their fixture helpers, their own module) is declared here, as the
// reader writes it; a listing of one of our interfaces is checked to be it.
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
const docs = join(root, 'docs');

/** What the reader writes for each guide: lines after its blocks, and files beside it. */
const READER: Record<string, { after?: string; files?: Record<string, string> }> = {
  'agent-clis.md': {
    after: `
import type { AgentProvider } from '@bb/headless';
declare const invocation: AgentProvider['invocation'];
declare const parseResult: AgentProvider['parseResult'];
declare const recordedOutput: string;
`,
  },
  'guides/writing-a-forge.md': {
    after: `
import type { WebhookFixture } from '@bb/forge/testing';
declare function seedScratchRepository(): Promise<{
  owner: string; name: string; issueNumber: number; issueTitle: string;
  pushBranch(branch: string): Promise<void>; merge(pr: number): Promise<void>;
  review(pr: number, input: { state: 'approved' | 'changes_requested' | 'commented'; body: string; comments: Array<{ path: string; line: number; body: string }> }): Promise<void>;
  delete(): Promise<void>;
}>;
declare function loadMyRecordedDeliveries(): WebhookFixture[];
`,
  },
  'guides/writing-a-state-store.md': {
    // The listing of ForgeStateStore is the real interface: each is assignable to the other.
    after: `
declare const listed: ForgeStateStore;
declare const real: import('@bb/state').ForgeStateStore;
export const asReal: import('@bb/state').ForgeStateStore = listed;
export const asListed: ForgeStateStore = real;
`,
    files: {
      'my-store.ts': `
import type { DeliveryLedger, EventInbox, ForgeStateStore, LeaseStore } from '@bb/state';
import type { RunRecordStore } from '@bb/provenance';
type Engine = ForgeStateStore & DeliveryLedger & EventInbox & { close(): void };
export declare const MyStore: { open(): Engine };
export type MyStore = Engine;
export declare const MyLeases: { open(): LeaseStore };
export declare const MyRunStore: { open(): RunRecordStore };
`,
    },
  },
};

function compile(dir: string, file: string): string[] {
  const base = ts.readConfigFile(join(root, 'tooling', 'tsconfig.base.json'), ts.sys.readFile);
  const { options } = ts.parseJsonConfigFileContent(base.config, ts.sys, join(root, 'e2e'));
  const program = ts.createProgram([file], { ...options, noEmit: true, noUnusedLocals: false });
  return ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.file?.fileName.startsWith(dir))
    .map((d) => {
      const { line } = d.file!.getLineAndCharacterOfPosition(d.start ?? 0);
      return `${d.file!.fileName.slice(dir.length + 1)}:${line + 1}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
    });
}

// Every markdown file of docs/ and docs/guides/, by its path under docs/.
const files = ['', 'guides/'].flatMap((d) =>
  readdirSync(join(docs, d))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `${d}${f}`),
);

describe('the docs', () => {
  it('are all here, and the ones with code say what their reader writes', () => {
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) {
      const blocks = readFileSync(join(docs, f), 'utf8').match(/```(?:ts|typescript)\n/g) ?? [];
      if (blocks.length > 0 && !READER[f]) expect.fail(`${f} has code: add it to READER`);
    }
  });

  for (const f of files) {
    const blocks = [
      ...readFileSync(join(docs, f), 'utf8').matchAll(/```(?:ts|typescript)\n([\s\S]*?)```/g),
    ].map((m) => m[1]!);
    if (blocks.length === 0) continue;
    it(`${f}: its ${blocks.length} TypeScript blocks compile against the packages`, () => {
      const dir = mkdtempSync(join(root, 'e2e', 'test', '.guide-'));
      try {
        const reader = READER[f] ?? {};
        for (const [name, text] of Object.entries(reader.files ?? {}))
          writeFileSync(join(dir, name), text);
        const file = join(dir, 'guide.ts');
        writeFileSync(file, `${blocks.join('\n')}\n${reader.after ?? ''}\nexport {};\n`);
        expect(compile(dir, file)).toEqual([]);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }, 60_000);
  }
});
