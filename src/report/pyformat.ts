/**
 * Python's `'%0.Nf' % x`: the exact binary value rounded half-to-even. JavaScript's
 * toFixed rounds exact ties away from zero instead; ties only happen when x·10^N lands
 * exactly on .5, which for a double means x is a multiple of 2^-k — detect and fix those.
 */
export function pyFixed(x: number, digits: number): string {
  if (!Number.isFinite(x)) return String(x);
  const text = Math.abs(x).toFixed(digits);
  const scaled = Math.abs(x) * 10 ** digits;
  const isTie = Number.isFinite(scaled) && scaled - Math.floor(scaled) === 0.5 && exactTie(Math.abs(x), digits);
  let result = text;
  if (isTie) {
    const lastDigit = Number(text[text.length - 1]);
    // toFixed rounded up to an odd last digit: Python keeps the even one below.
    if (lastDigit % 2 === 1) result = decrementLastDigit(text);
  }
  // Python keeps the sign of a negative value even when it rounds to zero ('-0.00').
  return x < 0 || Object.is(x, -0) ? `-${result}` : result;
}

/** True when x·10^digits is exactly an integer plus one half (checked with BigInt on x's binary form). */
function exactTie(x: number, digits: number): boolean {
  const [mantissa, exponent] = decompose(x);
  // x = mantissa · 2^exponent; x·10^d·2 must be an odd integer exactly.
  let numerator = mantissa * 10n ** BigInt(digits) * 2n;
  if (exponent >= 0) numerator <<= BigInt(exponent);
  else {
    const denominator = 1n << BigInt(-exponent);
    if (numerator % denominator !== 0n) return false;
    numerator /= denominator;
  }
  return numerator % 2n === 1n;
}

function decompose(x: number): [bigint, number] {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const hi = view.getUint32(0);
  const lo = view.getUint32(4);
  const biased = (hi >>> 20) & 0x7ff;
  const fraction = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
  if (biased === 0) return [fraction, -1074];
  return [fraction | (1n << 52n), biased - 1075];
}

function decrementLastDigit(text: string): string {
  return text.slice(0, -1) + String(Number(text[text.length - 1]) - 1);
}

/** Python's `'{:,}'.format(n)` for integers. */
export function pyThousands(n: number): string {
  const sign = n < 0 ? '-' : '';
  const digits = String(Math.abs(Math.trunc(n)));
  return sign + digits.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/** Python's `'{:>w}'.format(s)`. */
export function rjust(text: string, width: number): string {
  return text.length >= width ? text : ' '.repeat(width - text.length) + text;
}

/** Python's `'{:<w}'.format(s)`. */
export function ljust(text: string, width: number): string {
  return text.length >= width ? text : text + ' '.repeat(width - text.length);
}

/** Python's `str(list)` of integers: `[-1, 16, 112, 112]`. */
export function pyList(values: readonly (number | string)[]): string {
  return `[${values.join(', ')}]`;
}
