import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { bbHome, homeLayout, isName } from './index';

describe('names', () => {
  it('takes lower-case names of up to 63 characters that cannot be a path step or an option', () => {
    for (const ok of ['claude', 'impl-abc12', 'a', 'x.y_z-1', 'a'.repeat(63)])
      expect(isName(ok)).toBe(true);
    for (const bad of ['', '.', '..', '-rf', '_x', 'A', 'a/b', 'a b', 'a'.repeat(64), 'é', 'a\n'])
      expect(isName(bad), bad).toBe(false);
  });

  it('puts BB_HOME where the environment says, ~/.bot-bottle otherwise, and everything under it', () => {
    expect(bbHome({ BB_HOME: '/srv/bb' })).toBe('/srv/bb');
    expect(bbHome({ BB_HOME: '' })).toMatch(/\.bot-bottle$/);
    const l = homeLayout({ BB_HOME: '/srv/bb' });
    expect(l.bottle('impl-abc12')).toBe(join('/srv/bb', 'bottles', 'impl-abc12'));
    expect(l.mirror('m1')).toBe('/srv/bb/mirrors/m1.git');
    expect(l.launchMark('s')).toBe('/srv/bb/launching/s');
    expect(l.agents).toBe('/srv/bb/config/agents');
    expect(l.shared).toBe(false);
  });

  it('keeps bottles in BB_BOTTLE_STORE when it is set, and their disks mounted per machine', () => {
    const l = homeLayout({ BB_HOME: '/srv/bb', BB_BOTTLE_STORE: '/mnt/nfs/bottles' });
    expect(l.shared).toBe(true);
    expect(l.bottle('impl-abc12')).toBe('/mnt/nfs/bottles/impl-abc12');
    expect(l.mount('impl-abc12')).toBe('/srv/bb/mounts/impl-abc12');
    // Everything else stays this machine's.
    expect(l.mirror('m1')).toBe('/srv/bb/mirrors/m1.git');
    expect(l.launchMark('s')).toBe('/srv/bb/launching/s');
  });
});
