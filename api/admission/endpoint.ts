// What each invoke endpoint needs of admission, declared as data rather than as code the route
// runs in the middle of it: how much of the body is read before the call goes on, and what must
// hold before any money moves (a payer is never charged for a call the gateway then refuses).
import type { ProxyCall } from '../proxy/call.ts';

export type Endpoint = {
  mode: ProxyCall['mode'];
  /** The whole body is read (and held) before the stages go on; else only a JSON-RPC body, to be parsed. */
  readsWholeBody: boolean;
  /** A place in the start backlog before payment (503 past its bound, Temporal away too long). */
  needsBacklogPlace: boolean;
  /**
   * The agent's credential before payment: `resolve`d for the call itself (the streaming
   * endpoint sends it up), or `check-if-charged`: resolved only to refuse a priced call whose
   * credential cannot be, which the workflow's call would otherwise fail after the payer paid.
   */
  credential: 'resolve' | 'check-if-charged';
};

/** POST /v1/proxy/{id} and a public agent's URL: answered 202, run by the invocation workflow. */
export const TRANSACTIONAL: Endpoint = {
  mode: 'transactional',
  readsWholeBody: true,
  needsBacklogPlace: true,
  credential: 'check-if-charged',
};

/** POST …/stream: the body piped up as it comes, the answer piped down. */
export const STREAMING: Endpoint = {
  mode: 'streaming',
  readsWholeBody: false,
  needsBacklogPlace: false,
  credential: 'resolve',
};
