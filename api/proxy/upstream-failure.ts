// How the door answers an upstream failure the domain classified (gateway/upstream/errors.ts
// ErrorClass): its status and its coarse, fixed message, never an address, a port or an
// underlying error text.
import type { ErrorClass } from '../../gateway/upstream/errors.ts';

/** The caller-facing status for a failure before the first upstream byte (the v1 contract: 502 unreachable, 504 timeout). */
export function statusForClass(errorClass: ErrorClass): number {
  return errorClass === 'timeout' ? 504 : 502;
}

/** Coarse, fixed messages: never an address, a port or an underlying error text. */
export function coarseMessage(errorClass: ErrorClass): string {
  switch (errorClass) {
    case 'timeout':
      return 'upstream timed out';
    case 'circuit_open':
      return 'upstream unavailable';
    case 'credential':
    case 'protocol':
    case 'internal':
      return 'upstream call could not be made';
    default:
      return 'upstream unreachable';
  }
}
