// Who points at a credential. A reference is checked and the credential row share-locked in
// the same transaction that writes the reference, and DELETE takes the row's update lock
// before counting references, so a delete and a new reference cannot both win.
import { LockMode } from '@mikro-orm/core';
import type { EntityManager } from '@mikro-orm/postgresql';
import { AgentSchema } from '../db/entities.ts';
import { isId } from '../../lib/ids.ts';
import { SettlementConfigSchema } from '../settlement/entity.ts';
import { CredentialSchema, type Credential } from './entity.ts';

/** The tenant's credential with this id, share-locked; undefined when absent (or another tenant's). */
export async function lockReferencedCredential(
  em: EntityManager,
  tenantId: string,
  ref: string,
): Promise<Credential | undefined> {
  if (!isId('cred', ref)) return undefined;
  return (
    (await em.findOne(CredentialSchema, { id: ref, tenantId }, { lockMode: LockMode.PESSIMISTIC_READ })) ?? undefined
  );
}

/** True when a live agent's credential_ref or the tenant's facilitator_credential_ref names it. */
export async function isCredentialReferenced(
  em: EntityManager,
  tenantId: string,
  credentialId: string,
): Promise<boolean> {
  const agents = await em.count(AgentSchema, { tenantId, credentialRef: credentialId, deletedAt: null });
  if (agents > 0) return true;
  return (await em.count(SettlementConfigSchema, { tenantId, facilitatorCredentialRef: credentialId })) > 0;
}

export async function isFacilitatorCredential(
  em: EntityManager,
  tenantId: string,
  credentialId: string,
): Promise<boolean> {
  return (await em.count(SettlementConfigSchema, { tenantId, facilitatorCredentialRef: credentialId })) > 0;
}
