// What a credential may put in a request header: the default header of an api_key credential,
// and which secrets can travel in a header at all (visible ASCII, no edge spaces).
export const DEFAULT_API_KEY_HEADER = 'X-API-Key';

export const HEADER_SAFE = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/;

export function isHeaderSafe(secret: string): boolean {
  return HEADER_SAFE.test(secret);
}
