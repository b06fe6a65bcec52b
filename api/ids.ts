// Resource ids are a type prefix plus a UUIDv7 (SPEC: Conventions): time-ordered, so
// primary-key indexes stay append-mostly and ids sort by creation.
import { v7 as uuidv7 } from 'uuid';

export type IdPrefix = 'agt' | 'cred' | 'inv' | 'pdec' | 'body';

export function newId(prefix: IdPrefix): string {
  return `${prefix}_${uuidv7()}`;
}

const ID_SHAPE = /^[a-z]+_[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** True when `value` is a well-formed id of the given prefix; anything else is treated as absent (404). */
export function isId(prefix: IdPrefix, value: string): boolean {
  return value.startsWith(`${prefix}_`) && ID_SHAPE.test(value);
}
