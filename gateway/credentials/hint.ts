// The masked hint shown for a managed secret: enough to tell two keys apart, never enough to
// matter. At most the last four characters, fewer for short secrets, none below eight.
export function maskedHint(secret: string): string {
  const chars = [...secret.trimEnd()];
  const shown = chars.length >= 16 ? 4 : chars.length >= 8 ? 2 : 0;
  return `****${chars.slice(chars.length - shown).join('')}`;
}
