// docs/guides/writing-a-forge.md promises code a third party can start from: its
// stub and its conformance example must compile against the real API (the
// helpers the example leaves to the reader are declared here, as the reader writes them).
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { expect, it } from 'vitest';

const pkg = join(dirname(fileURLToPath(import.meta.url)), '..');
const guide = join(pkg, '..', '..', 'docs', 'guides', 'writing-a-forge.md');

it("the forge guide's stub and conformance example compile against @bb/forge", () => {
  const blocks = [...readFileSync(guide, 'utf8').matchAll(/```ts\n([\s\S]*?)```/g)].map(
    (m) => m[1]!,
  );
  expect(blocks.length).toBeGreaterThanOrEqual(2);
  const readerWrites = `
import type { WebhookFixture } from '@bb/forge/testing';
declare function seedScratchRepository(): Promise<{
  owner: string; name: string; issueNumber: number; issueTitle: string;
  pushBranch(branch: string): Promise<void>; merge(pr: number): Promise<void>;
  review(pr: number, input: { state: 'approved' | 'changes_requested' | 'commented'; body: string; comments: Array<{ path: string; line: number; body: string }> }): Promise<void>;
  delete(): Promise<void>;
}>;
declare function loadMyRecordedDeliveries(): WebhookFixture[];
`;
  const dir = mkdtempSync(join(pkg, 'test', '.guide-'));
  try {
    const file = join(dir, 'guide.ts');
    writeFileSync(file, `${blocks.join('\n')}\n${readerWrites}`);
    const base = ts.readConfigFile(
      join(pkg, '..', '..', 'tooling', 'tsconfig.base.json'),
      ts.sys.readFile,
    );
    const { options } = ts.parseJsonConfigFileContent(base.config, ts.sys, pkg);
    const program = ts.createProgram([file], { ...options, noEmit: true, noUnusedLocals: false });
    const problems = ts
      .getPreEmitDiagnostics(program)
      .filter((d) => d.file?.fileName === file)
      .map((d) => {
        const { line } = d.file!.getLineAndCharacterOfPosition(d.start ?? 0);
        return `line ${line + 1}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`;
      });
    expect(problems).toEqual([]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 60_000);
