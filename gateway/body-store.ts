// The stored bodies: request and response bodies are stored here and travel through Temporal
// by id only. PostgreSQL fills the interface today; an object store (S3, GCS) could fill it
// without touching the pipeline or the workflow. A body whose invocation row never got
// written is an orphan, harmless, and the kind of thing an object store's lifecycle rule sweeps.
import { sha256Hex } from './receipts/digest.ts';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import { BodySchema } from './db/entities.ts';
import { newId } from '../lib/ids.ts';

type StoredBody = { id: string; contentType: string | null; content: Buffer; sizeBytes: number };

export interface BodyStore {
  /** Stores a body on its own. */
  put(tenantId: string, contentType: string | null, content: Buffer): Promise<string>;
  /**
   * Stores a body as part of the caller's unit of work: a store in the same database joins
   * it (one commit for body and row); any other store uploads now and returns the id.
   */
  stage(em: EntityManager, tenantId: string, contentType: string | null, content: Buffer): Promise<string>;
  get(tenantId: string, id: string): Promise<StoredBody | null>;
  /**
   * Only a store in the gateway's own database: the INSERT for a body, to run inside another
   * statement (a data-modifying CTE), so body and row cost one round trip and one commit.
   */
  insertSql?(
    tenantId: string,
    contentType: string | null,
    content: Buffer,
  ): { id: string; sql: string; params: unknown[] };
}

export function createPostgresBodyStore(orm: MikroORM): BodyStore {
  function create(em: EntityManager, tenantId: string, contentType: string | null, content: Buffer): string {
    const id = newId('body');
    em.create(BodySchema, {
      id,
      tenantId,
      contentType,
      content,
      sizeBytes: content.length,
      sha256: sha256Hex(content),
      createdAt: new Date(),
    });
    return id;
  }
  return {
    async put(tenantId, contentType, content) {
      const em = orm.em.fork();
      const id = create(em, tenantId, contentType, content);
      await em.flush();
      return id;
    },
    async stage(em, tenantId, contentType, content) {
      return create(em, tenantId, contentType, content);
    },
    insertSql(tenantId, contentType, content) {
      const id = newId('body');
      return {
        id,
        sql: 'insert into bodies (id, tenant_id, content_type, content, size_bytes, sha256, created_at) values (?, ?, ?, ?, ?, ?, ?)',
        params: [id, tenantId, contentType, content, content.length, sha256Hex(content), new Date()],
      };
    },
    async get(tenantId, id) {
      const row = await orm.em.fork().findOne(BodySchema, { id, tenantId });
      return row
        ? {
            id: row.id,
            contentType: row.contentType ?? null,
            content: Buffer.from(row.content),
            sizeBytes: row.sizeBytes,
          }
        : null;
    },
  };
}
