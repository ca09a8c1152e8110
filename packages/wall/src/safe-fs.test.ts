import { execFileSync } from 'node:child_process';
import {
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isBbError } from '@bb/errors';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  chownTreeNoFollow,
  lstatNoFollow,
  mkdirNoFollow,
  readFileNoFollow,
  writeFileNoFollow,
} from './safe-fs';

let root: string;
let outside: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), 'wall-root-'));
  outside = mkdtempSync(join(tmpdir(), 'wall-outside-'));
  writeFileSync(join(outside, 'victim'), 'original\n');
});
afterEach(() => {
  rmSync(root, { recursive: true, force: true });
  rmSync(outside, { recursive: true, force: true });
});
const unsafe = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    return isBbError(err, 'UNSAFE_PATH');
  }
  return false;
};

describe('writeFileNoFollow', () => {
  it('writes a file, making the directories on the way', () => {
    writeFileNoFollow(root, '.bb/deep/settings.json', '{"a":1}', { mode: 0o600 });
    expect(readFileSync(join(root, '.bb/deep/settings.json'), 'utf8')).toBe('{"a":1}');
    expect(statSync(join(root, '.bb/deep/settings.json')).mode & 0o777).toBe(0o600);
  });

  it('replaces a symlink at the file name instead of writing through it', () => {
    mkdirSync(join(root, '.bb'));
    symlinkSync(join(outside, 'victim'), join(root, '.bb', 'mcp.json'));
    writeFileNoFollow(root, '.bb/mcp.json', 'ours');
    expect(readFileSync(join(outside, 'victim'), 'utf8')).toBe('original\n');
    expect(lstatSync(join(root, '.bb', 'mcp.json')).isFile()).toBe(true);
  });

  it('creates nothing through a dangling symlink', () => {
    symlinkSync(join(outside, 'planted'), join(root, 'x.json'));
    writeFileNoFollow(root, 'x.json', 'ours');
    expect(readdirSync(outside)).toEqual(['victim']);
  });

  it('refuses a directory on the way that is a symlink', () => {
    symlinkSync(outside, join(root, '.claude'));
    expect(unsafe(() => writeFileNoFollow(root, '.claude/settings.json', 'x'))).toBe(true);
    expect(readdirSync(outside)).toEqual(['victim']);
  });

  it('refuses a path that climbs out', () => {
    expect(unsafe(() => writeFileNoFollow(root, '../x', 'x'))).toBe(true);
    expect(unsafe(() => writeFileNoFollow(root, 'a/../../x', 'x'))).toBe(true);
  });

  it('refuses to replace a directory', () => {
    mkdirSync(join(root, 'd'));
    expect(unsafe(() => writeFileNoFollow(root, 'd', 'x'))).toBe(true);
  });

  it.runIf(process.getuid?.() === 0)('gives the file and new directories to the owner', () => {
    writeFileNoFollow(root, 'a/b.txt', 'x', { owner: { uid: 1000, gid: 1000 } });
    expect(statSync(join(root, 'a')).uid).toBe(1000);
    expect(statSync(join(root, 'a', 'b.txt')).uid).toBe(1000);
  });
});

describe('readFileNoFollow', () => {
  it('reads a regular file and says undefined for none', () => {
    writeFileSync(join(root, 'STUCK.md'), 'help');
    expect(readFileNoFollow(root, 'STUCK.md')?.toString()).toBe('help');
    expect(readFileNoFollow(root, 'missing')).toBeUndefined();
    expect(readFileNoFollow(root, 'no/such/dir/file')).toBeUndefined();
  });

  it('refuses a symlink, at the end or on the way', () => {
    symlinkSync(join(outside, 'victim'), join(root, 'STUCK.md'));
    expect(unsafe(() => readFileNoFollow(root, 'STUCK.md'))).toBe(true);
    symlinkSync(outside, join(root, 'dir'));
    expect(unsafe(() => readFileNoFollow(root, 'dir/victim'))).toBe(true);
  });

  it('refuses a FIFO without hanging, and files over the limit', () => {
    execFileSync('mkfifo', [join(root, 'pipe')]);
    expect(unsafe(() => readFileNoFollow(root, 'pipe'))).toBe(true);
    writeFileSync(join(root, 'big'), 'x'.repeat(100));
    expect(unsafe(() => readFileNoFollow(root, 'big', { maxBytes: 10 }))).toBe(true);
  });
});

describe('lstatNoFollow and mkdirNoFollow', () => {
  it('report a symlink as a symlink and refuse one on the way', () => {
    symlinkSync(outside, join(root, 'l'));
    expect(lstatNoFollow(root, 'l')?.isSymbolicLink()).toBe(true);
    expect(lstatNoFollow(root, 'nothing')).toBeUndefined();
    expect(unsafe(() => lstatNoFollow(root, 'l/victim'))).toBe(true);
    expect(unsafe(() => mkdirNoFollow(root, 'l/new'))).toBe(true);
    mkdirNoFollow(root, 'a/b/c');
    expect(statSync(join(root, 'a/b/c')).isDirectory()).toBe(true);
  });
});

describe.runIf(process.getuid?.() === 0)('chownTreeNoFollow', () => {
  it('changes the tree and its symlinks, never their targets', async () => {
    mkdirSync(join(root, 'w'));
    writeFileSync(join(root, 'w', 'f'), 'x');
    symlinkSync(join(outside, 'victim'), join(root, 'w', 'link'));
    symlinkSync(outside, join(root, 'w', 'dirlink'));
    await chownTreeNoFollow({ uid: 1000, gid: 1000 }, join(root, 'w'));
    expect(statSync(join(root, 'w', 'f')).uid).toBe(1000);
    expect(lstatSync(join(root, 'w', 'link')).uid).toBe(1000);
    expect(statSync(join(outside, 'victim')).uid).toBe(0);
    expect(statSync(outside).uid).toBe(0);
  });
});
