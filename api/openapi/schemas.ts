// Schemas of the answers that belong to no resource module: the error body, the probes and the
// receipt keys. Strict, like every answer schema: test/management/openapi.test.ts validates live answers
// with every object closed, so a field an answer carries that the document does not declare fails.
import { z } from 'zod';

export const ErrorBody = z
  .strictObject({ error: z.string().meta({ description: 'Coarse, caller-safe message; never internal state.' }) })
  .meta({ id: 'Error', description: 'Body of every 4xx answer that carries one. 401 and 500 have no body.' });

export const BudgetExceededBody = z
  .strictObject({
    error: z.literal('budget exceeded'),
    budget_id: z.string().meta({ description: 'The strictest refusing budget: the one whose window resets last.' }),
  })
  .meta({ id: 'BudgetExceeded', description: 'A call a hard budget cannot take (docs/API.md "Budgets").' });

export const Health = z.strictObject({ status: z.literal('ok') }).meta({ id: 'Health' });
export const Readiness = z
  .strictObject({
    status: z.enum(['ready', 'not_ready']),
    checks: z.strictObject({
      database: z.boolean(),
      start_backlog: z.boolean().meta({ description: 'The start backlog has room.' }),
    }),
    temporal: z.enum(['reachable', 'unreachable']).meta({
      description:
        'Reported, not required: transactional calls are accepted while Temporal is away, up to the start backlog.',
    }),
    start_backlog: z.strictObject({
      accepted_unstarted: z
        .int()
        .meta({ description: 'Accepted calls of this process whose workflow start is not yet known.' }),
      limit: z.int(),
    }),
  })
  .meta({ id: 'Readiness' });
export const Version = z
  .strictObject({ name: z.string(), version: z.string(), commit: z.string().nullable() })
  .meta({ id: 'Version' });
/** The console's asset names are the build's (`main-<hash>.js`); any other name is a 404. */
export const ConsoleAssetPath = z.object({
  file: z.string().meta({ description: 'An asset name the console page names (`main-<hash>.js`, `main-<hash>.css`).' }),
});
export const Jwks = z
  .strictObject({ keys: z.array(z.record(z.string(), z.unknown())) })
  .meta({ id: 'JWKS', description: 'Ed25519 public keys (JWK, `kid` named) of the receipt signers.' });
