// Where a top-level member's value lies in a JSON object's text, as byte offsets: so that one
// member can be replaced in place, the rest of the text left byte for byte as it was sent,
// without parsing the whole value again (a JSON-RPC request may be 32 MiB). Written by hand: no
// JSON library reports positions, and a scan of text JSON.parse already accepted is short.

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

/** The longest a key naming a short member can be written (every character as a `\uXXXX` escape, quoted). */
const escapedLength = (name: string) => name.length * 6 + 2;

const isSpace = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;

function skipSpace(text: Buffer, at: number): number {
  while (at < text.length && isSpace(text[at])) at++;
  return at;
}

/** The offset just past the string starting at `at` (its opening quote). */
function skipString(text: Buffer, at: number): number {
  let from = at + 1;
  for (;;) {
    const quote = text.indexOf(QUOTE, from);
    if (quote === -1) throw new SyntaxError('unterminated string');
    let slashes = 0;
    while (text[quote - 1 - slashes] === BACKSLASH) slashes++;
    if (slashes % 2 === 0) return quote + 1;
    from = quote + 1;
  }
}

/** The offset just past the value starting at `at`. */
function skipValue(text: Buffer, at: number): number {
  const first = text[at];
  if (first === QUOTE) return skipString(text, at);
  if (first === OPEN_OBJECT || first === OPEN_ARRAY) {
    let depth = 0;
    let i = at;
    while (i < text.length) {
      const b = text[i];
      if (b === QUOTE) {
        i = skipString(text, i);
        continue;
      }
      if (b === OPEN_OBJECT || b === OPEN_ARRAY) depth++;
      else if (b === CLOSE_OBJECT || b === CLOSE_ARRAY) {
        depth--;
        if (depth === 0) return i + 1;
      }
      i++;
    }
    throw new SyntaxError('unterminated value');
  }
  // A number or a literal: up to the next delimiter.
  let i = at;
  while (
    i < text.length &&
    !isSpace(text[i]) &&
    text[i] !== COMMA &&
    text[i] !== CLOSE_OBJECT &&
    text[i] !== CLOSE_ARRAY
  )
    i++;
  return i;
}

/**
 * The [start, end) byte spans of the values of the object's top-level members named `name` (as
 * JSON.parse reads the key, escapes and all), in order; more than one when the name is repeated.
 * `text` must be JSON that JSON.parse accepts, a whole object; anything else throws.
 */
export function topLevelMemberSpans(text: Buffer, name: string): Array<[number, number]> {
  const spans: Array<[number, number]> = [];
  let i = skipSpace(text, 0);
  if (text[i] !== OPEN_OBJECT) throw new SyntaxError('not an object');
  i = skipSpace(text, i + 1);
  if (text[i] === CLOSE_OBJECT) return spans;
  for (;;) {
    if (text[i] !== QUOTE) throw new SyntaxError('expected a key');
    const keyEnd = skipString(text, i);
    const named =
      keyEnd - i <= escapedLength(name) && (JSON.parse(text.toString('utf8', i, keyEnd)) as string) === name;
    i = skipSpace(text, keyEnd);
    if (text[i] !== COLON) throw new SyntaxError('expected a colon');
    const start = skipSpace(text, i + 1);
    const end = skipValue(text, start);
    if (named) spans.push([start, end]);
    i = skipSpace(text, end);
    if (text[i] === COMMA) i = skipSpace(text, i + 1);
    else if (text[i] === CLOSE_OBJECT) return spans;
    else throw new SyntaxError('expected a comma');
  }
}
