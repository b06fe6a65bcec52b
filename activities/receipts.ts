// The receipt step of InvocationWorkflow, run after the invocation activity has completed
// the row when the agent emits receipts. Being an activity in the workflow's completion path
// is the guarantee: a worker crash retries it, it cannot be skipped. Idempotent: the first
// signed receipt is kept, a retry returns it.
import { ApplicationFailure } from '@temporalio/common';
import type { MikroORM } from '@mikro-orm/postgresql';
import { createReceiptStore } from '../gateway/receipts/store.ts';
import { countIssued, createReceiptSigner, NoSigningKeyError, type SignedReceipt } from '../gateway/receipts/signer.ts';
import type { ReceiptConfig } from '../gateway/receipts/config.ts';

export interface ReceiptActivities {
  /** Signs and stores the receipt of a completed invocation; answers the key id it was signed with. */
  issueReceipt(invocationId: string): Promise<{ kid: string }>;
}

export function createReceiptActivities(deps: { orm: MikroORM; receipts: ReceiptConfig }): ReceiptActivities {
  const store = createReceiptStore(deps.orm);
  const sign = createReceiptSigner(deps.receipts);
  return {
    async issueReceipt(invocationId) {
      const facts = await store.factsFor(invocationId);
      // The workflow calls this only after the row is terminal; anything else is a bug worth retrying loudly.
      if (!facts) throw ApplicationFailure.retryable('invocation is not complete', 'InvocationNotComplete');
      const existing = await store.get(facts.tenantId, invocationId);
      if (existing) return { kid: existing.kid };
      let signed: SignedReceipt;
      try {
        signed = await sign(facts);
      } catch (err) {
        if (err instanceof NoSigningKeyError) throw ApplicationFailure.retryable(err.message, 'NoSigningKey');
        throw err;
      }
      const { kid, jws } = signed;
      const saved = await store.save({ invocationId, tenantId: facts.tenantId, agentId: facts.agentId, kid, jws });
      if (saved.jws === jws) countIssued(saved);
      return { kid: saved.kid };
    },
  };
}
