// What the gateway's domain says when it refuses a request: its kind and a caller-safe message.
// The domain knows no HTTP; the door (api/errors.ts) answers each kind with its status.
import { UniqueConstraintViolationException } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';

export type RefusalKind =
  /** What was asked is malformed or breaks a rule. */
  | 'invalid'
  /** No such thing for this tenant (another tenant's behaves as absent). */
  | 'not_found'
  /** Valid, but the state it meets refuses it (a name taken, a thing still in use). */
  | 'conflict';

export class Refusal extends Error {
  readonly kind: RefusalKind;
  constructor(kind: RefusalKind, message: string) {
    super(message);
    this.name = 'Refusal';
    this.kind = kind;
  }
}

export const invalid = (message: string) => new Refusal('invalid', message);
export const absent = (what = 'not found') => new Refusal('not_found', what);
export const conflicting = (message: string) => new Refusal('conflict', message);

/** Flushes the unit of work; a unique name another request took meanwhile is a conflict saying `nameTaken`. */
export async function flushOrConflict(em: EntityManager, nameTaken: string): Promise<void> {
  try {
    await em.flush();
  } catch (err) {
    if (err instanceof UniqueConstraintViolationException) throw conflicting(nameTaken);
    throw err;
  }
}
