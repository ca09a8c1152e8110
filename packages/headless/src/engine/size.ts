/**
 * A size in bytes from a manifest's value: a number of bytes, or a number with
 * `k`, `m` or `g` (powers of 1024), as a manifest's schema has checked it.
 */
export function memoryBytes(value: number | string | undefined): number | undefined {
  if (value === undefined || typeof value === 'number') return value;
  const m = /^(\d+(?:\.\d+)?)([kmg])$/i.exec(value)!;
  return Math.round(
    Number(m[1]) * 1024 ** ({ k: 1, m: 2, g: 3 } as const)[m[2]!.toLowerCase() as 'k' | 'm' | 'g'],
  );
}
