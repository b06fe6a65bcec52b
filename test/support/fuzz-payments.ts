// Arbitraries for X-PAYMENT headers and settle bodies: arbitrary text, base64 of arbitrary
// bytes or JSON, and near-valid payments (signed for real, then one field mutated). Signing
// is asynchronous, so the arbitrary draws a mutation descriptor and `applyMutation` applies
// it to a payment the check has just signed.
import fc from 'fast-check';
import { anyJson, headerValue, wrongType } from './fuzz-arbitraries.ts';

const PAYMENT_PATHS: string[][] = [
  ['x402Version'],
  ['scheme'],
  ['network'],
  ['payload'],
  ['payload', 'signature'],
  ['payload', 'authorization'],
  ['payload', 'authorization', 'from'],
  ['payload', 'authorization', 'to'],
  ['payload', 'authorization', 'value'],
  ['payload', 'authorization', 'validAfter'],
  ['payload', 'authorization', 'validBefore'],
  ['payload', 'authorization', 'nonce'],
];

export type Mutation = {
  path: string[];
  how: 'none' | 'wrong' | 'drop' | 'flip-case' | 'flip-hex' | 'numeric' | 'pad' | 'extra';
  value: unknown;
  at: number;
  numeric: string;
};

export const mutation: fc.Arbitrary<Mutation> = fc.record({
  path: fc.constantFrom(...PAYMENT_PATHS),
  how: fc.constantFrom(
    'none',
    'wrong',
    'wrong',
    'drop',
    'flip-case',
    'flip-case',
    'flip-hex',
    'flip-hex',
    'numeric',
    'pad',
    'extra',
  ),
  value: wrongType,
  at: fc.nat({ max: 200 }),
  numeric: fc.constantFrom(
    '0',
    '-1',
    '1e3',
    '0x10',
    ' 1000',
    '1000.0',
    '١٠٠٠',
    '115792089237316195423570985008687907853269984665640564039457584007913129639936',
    '99999999999999999999',
  ),
}) as fc.Arbitrary<Mutation>;

function flipCase(text: string, at: number): string {
  const letters = [...text].map((c, i) => (i > 1 && /[a-fA-F]/.test(c) ? i : -1)).filter((i) => i >= 0);
  if (letters.length === 0) return text.toUpperCase();
  const i = letters[at % letters.length];
  const c = text[i];
  return text.slice(0, i) + (c === c.toUpperCase() ? c.toLowerCase() : c.toUpperCase()) + text.slice(i + 1);
}

function flipHex(text: string, at: number): string {
  if (text.length <= 2) return `${text}0`;
  const i = 2 + (at % (text.length - 2));
  const c = text[i].toLowerCase();
  const next = c === 'f' ? '0' : /[0-9a-e]/.test(c) ? (parseInt(c, 16) + 1).toString(16) : 'a';
  return text.slice(0, i) + next + text.slice(i + 1);
}

/** A deep copy of `doc` with the mutation applied (the original is left alone). */
export function applyMutation<T>(doc: T, m: Mutation): unknown {
  const copy = JSON.parse(JSON.stringify(doc)) as Record<string, any>;
  if (m.how === 'none') return copy;
  let parent: Record<string, any> = copy;
  for (const key of m.path.slice(0, -1)) {
    if (!parent[key] || typeof parent[key] !== 'object') return copy;
    parent = parent[key];
  }
  const key = m.path[m.path.length - 1];
  const current = parent[key];
  switch (m.how) {
    case 'wrong':
      parent[key] = m.value;
      break;
    case 'drop':
      delete parent[key];
      break;
    case 'flip-case':
      parent[key] = typeof current === 'string' ? flipCase(current, m.at) : m.value;
      break;
    case 'flip-hex':
      parent[key] =
        typeof current === 'string' ? flipHex(current, m.at) : typeof current === 'number' ? current + 1 : m.value;
      break;
    case 'numeric':
      parent[key] = typeof current === 'number' ? Number(m.numeric) : m.numeric;
      break;
    case 'pad':
      parent[key] = typeof current === 'string' ? ` ${current} ` : [current];
      break;
    case 'extra':
      parent[`${key}_extra`] = m.value;
      break;
  }
  return copy;
}

/** How an X-PAYMENT header is made from a (possibly mutated) payment document. */
export type Encoding = 'base64' | 'base64url' | 'unpadded' | 'spaced' | 'utf16' | 'double';

export const encoding: fc.Arbitrary<Encoding> = fc.constantFrom(
  'base64',
  'base64',
  'base64',
  'base64url',
  'unpadded',
  'spaced',
  'utf16',
  'double',
);

export function encodeHeader(doc: unknown, how: Encoding): string {
  const json = JSON.stringify(doc) ?? 'undefined';
  switch (how) {
    case 'base64':
      return Buffer.from(json).toString('base64');
    case 'base64url':
      return Buffer.from(json).toString('base64url');
    case 'unpadded':
      return Buffer.from(json).toString('base64').replace(/=+$/, '');
    case 'spaced':
      return ` ${Buffer.from(json).toString('base64')} `;
    case 'utf16':
      return Buffer.from(json, 'utf16le').toString('base64');
    case 'double':
      return Buffer.from(Buffer.from(json).toString('base64')).toString('base64');
  }
}

/** Headers that are not near-valid payments at all. */
export const garbageHeader: fc.Arbitrary<string> = fc.oneof(
  { weight: 2, arbitrary: headerValue },
  { weight: 2, arbitrary: fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b).toString('base64')) },
  { weight: 3, arbitrary: anyJson.map((j) => Buffer.from(JSON.stringify(j) ?? 'null').toString('base64')) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '=',
      '====',
      'e30=',
      'bnVsbA==',
      'W10=',
      'A'.repeat(8193),
      'A'.repeat(8192),
      '%7B%7D',
      'eyJ4NDAyVmVyc2lvbiI6MX0',
    ),
  },
);
