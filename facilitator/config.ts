// Facilitator configuration from the environment (zod), like the gateway's.
import { z } from 'zod';

const FacilitatorEnv = z.object({
  FACILITATOR_PORT: z.coerce.number().int().min(0).max(65535).default(8443),
  FACILITATOR_PUBLIC_PORT: z.coerce.number().int().min(0).max(65535).default(8444),
  FACILITATOR_HOST: z.string().default('127.0.0.1'),
  FACILITATOR_TLS_CERT: z.string(),
  FACILITATOR_TLS_KEY: z.string(),
  FACILITATOR_TLS_CA: z.string(),
  FACILITATOR_DATABASE_URL: z.string().default('postgres://postgres@127.0.0.1:5432/facilitator'),
  CHAIN_RPC_URL: z.string().default('http://127.0.0.1:8545'),
  TOKEN_ADDRESS: z.string().regex(/^0x[0-9a-fA-F]{40}$/),
  TEMPORAL_ADDRESS: z.string().default('127.0.0.1:7233'),
  TEMPORAL_NAMESPACE: z.string().default('default'),
});

export type FacilitatorConfig = {
  port: number;
  publicPort: number;
  host: string;
  tls: { certFile: string; keyFile: string; caFile: string };
  databaseUrl: string;
  chainRpcUrl: string;
  tokenAddress: string;
  temporal: { address: string; namespace: string; taskQueue: string };
};

export function loadFacilitatorConfig(env: NodeJS.ProcessEnv = process.env): FacilitatorConfig {
  const parsed = FacilitatorEnv.safeParse(env);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new Error(`invalid facilitator configuration: ${issue.path.join('.')}: ${issue.message}`);
  }
  const e = parsed.data;
  return {
    port: e.FACILITATOR_PORT,
    publicPort: e.FACILITATOR_PUBLIC_PORT,
    host: e.FACILITATOR_HOST,
    tls: { certFile: e.FACILITATOR_TLS_CERT, keyFile: e.FACILITATOR_TLS_KEY, caFile: e.FACILITATOR_TLS_CA },
    databaseUrl: e.FACILITATOR_DATABASE_URL,
    chainRpcUrl: e.CHAIN_RPC_URL,
    tokenAddress: e.TOKEN_ADDRESS,
    temporal: { address: e.TEMPORAL_ADDRESS, namespace: e.TEMPORAL_NAMESPACE, taskQueue: 'facilitator' },
  };
}
