// The transactional invocation's one activity: load what the row references, call the
// upstream, record the outcome. Idempotent by design: a retried attempt finds the row
// already terminal and returns it; an attempt that may already have reached the upstream
// is not re-sent unless the agent opted in (retry_non_idempotent).
import { createHash } from 'node:crypto';
import { Context } from '@temporalio/activity';
import type { MikroORM } from '@mikro-orm/postgresql';
import type { Agent as Dispatcher } from 'undici';
import { AgentSchema, BodySchema, InvocationSchema, type Invocation } from '../api/db/entities.ts';
import { newId } from '../api/ids.ts';
import { callUpstream, classifyError, type ErrorClass } from '../api/upstream/client.ts';
import type { CredentialResolver } from '../api/credentials/resolver.ts';

export type InvocationOutcome = {
  status: 'succeeded' | 'failed';
  upstreamStatus: number | null;
  latencyMs: number | null;
  errorClass: ErrorClass | null;
};

export interface InvocationActivities {
  performInvocation(invocationId: string): Promise<InvocationOutcome>;
}

export type InvocationDeps = {
  orm: MikroORM;
  dispatcher: Dispatcher;
  credentials: CredentialResolver;
  upstreamTimeoutMs: number;
};

function outcomeOf(row: Invocation): InvocationOutcome {
  return {
    status: row.status as 'succeeded' | 'failed',
    upstreamStatus: row.upstreamStatus ?? null,
    latencyMs: row.latencyMs ?? null,
    errorClass: (row.errorClass as ErrorClass | null) ?? null,
  };
}

export function createInvocationActivities(deps: InvocationDeps): InvocationActivities {
  return {
    async performInvocation(invocationId) {
      const em = deps.orm.em.fork();
      const row = await em.findOneOrFail(InvocationSchema, { id: invocationId });
      if (row.status === 'succeeded' || row.status === 'failed') return outcomeOf(row);

      const agent = await em.findOneOrFail(AgentSchema, { id: row.agentId, tenantId: row.tenantId });
      const complete = async (fields: Partial<Invocation>): Promise<InvocationOutcome> => {
        const now = new Date();
        em.assign(row, { ...fields, updatedAt: now, completedAt: now });
        await em.flush();
        return outcomeOf(row);
      };

      // An earlier attempt may have delivered the request before its worker died.
      if (row.attempts > 0 && !agent.retryNonIdempotent) {
        return complete({ status: 'failed', errorClass: 'interrupted' });
      }
      em.assign(row, { status: 'running', attempts: row.attempts + 1, updatedAt: new Date() });
      await em.flush();

      if (!agent.upstreamUrl) return complete({ status: 'failed', errorClass: 'protocol' });
      const body = row.requestBodyId ? await em.findOneOrFail(BodySchema, { id: row.requestBodyId }) : null;
      const credentialHeaders = await deps.credentials.headersFor(row.tenantId, agent.credentialRef);

      const heartbeat = setInterval(() => Context.current().heartbeat(), 2_000);
      try {
        const reply = await callUpstream(deps.dispatcher, {
          url: agent.upstreamUrl,
          method: 'POST',
          // Caller headers already passed the block-list when the row was written.
          headers: { ...row.requestHeaders, ...credentialHeaders, 'x-request-id': row.requestId },
          body: body ? Buffer.from(body.content) : undefined,
          timeoutMs: deps.upstreamTimeoutMs,
          signal: Context.current().cancellationSignal,
        });
        let responseBodyId: string | null = null;
        if (agent.captureBody) {
          responseBodyId = newId('body');
          em.create(BodySchema, {
            id: responseBodyId,
            tenantId: row.tenantId,
            contentType: String(reply.headers['content-type'] ?? '') || null,
            content: reply.body,
            sizeBytes: reply.body.length,
            sha256: createHash('sha256').update(reply.body).digest('hex'),
            createdAt: new Date(),
          });
        }
        return await complete({
          status: 'succeeded',
          upstreamStatus: reply.status,
          latencyMs: reply.latencyMs,
          ttftMs: reply.ttftMs,
          errorClass: reply.status >= 500 ? 'upstream_5xx' : reply.status >= 400 ? 'upstream_4xx' : null,
          responseBodyId,
          responseContentType: String(reply.headers['content-type'] ?? '') || null,
        });
      } catch (err) {
        return complete({ status: 'failed', errorClass: classifyError(err) });
      } finally {
        clearInterval(heartbeat);
      }
    },
  };
}
