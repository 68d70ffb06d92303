// Sizes as people write them, read as the CLI reads its flags: 512Mi, 1G,
// 4GiB, 1.5g are binary multiples whatever the spelling (as docker's
// --memory reads them); a string of digits alone is MiB. A number is bytes.

/** A size: a number of bytes, or a string with a unit ("512Mi", "1G"). */
export type Size = number | bigint | string;

const mib = 1n << 20n;
const units: Record<string, bigint> = { "": 1n, k: 1n << 10n, m: mib, g: 1n << 30n, t: 1n << 40n, p: 1n << 50n };

/** parseSize returns a size in bytes, or throws naming what is wrong with it. */
export function parseSize(s: Size, what = "size"): bigint {
  if (typeof s === "bigint") return s;
  if (typeof s === "number") {
    if (!Number.isSafeInteger(s) || s < 0) throw new RangeError(`${what} ${s}: want a whole number of bytes`);
    return BigInt(s);
  }
  if (/^\d+$/.test(s)) return BigInt(s) * mib;
  const m = /^(\d+(?:\.\d+)?) ?([kmgtp])?i?b?$/i.exec(s);
  if (!m) throw new RangeError(`${what} ${JSON.stringify(s)}: want a number with a unit (512Mi, 1G, 4GiB) or a number of MiB`);
  const unit = units[(m[2] ?? "").toLowerCase()];
  const [whole, frac = ""] = m[1].split(".");
  // Exact arithmetic: 1.5G is 1610612736, not a float's approximation.
  return (BigInt(whole + frac) * unit) / 10n ** BigInt(frac.length);
}
