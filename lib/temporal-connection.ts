// Where and how every process reaches Temporal, read with @temporalio/envconfig so the project
// follows the SDK's own conventions: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, TEMPORAL_API_KEY,
// TEMPORAL_TLS (true/false), TEMPORAL_TLS_CLIENT_CERT_PATH / _KEY_PATH, TEMPORAL_TLS_SERVER_CA_CERT_PATH,
// TEMPORAL_TLS_SERVER_NAME, TEMPORAL_PROFILE and a TOML profile file in TEMPORAL_CONFIG_FILE.
// Plain, server TLS, mutual TLS and API-key connections all come out of the same settings.
import { existsSync } from 'node:fs';
import { loadClientConfigProfile, toClientOptions, type ClientConfigProfile } from '@temporalio/envconfig';
import type { TLSConfig } from '@temporalio/client';
import { ConfigError, setSettings } from './config.ts';
import type { WorkerVersion } from './worker-version.ts';

/** What a client Connection and a worker NativeConnection both take. */
export type TemporalConnectionOptions = {
  address: string;
  tls?: TLSConfig | boolean;
  apiKey?: string;
  metadata?: Record<string, string>;
};

export type TemporalSettings = { namespace: string; connection: TemporalConnectionOptions };

/** What a process with a worker knows of Temporal: the connection, its task queue and the version its worker runs as. */
export type TemporalWorkerSettings = {
  address: string;
  namespace: string;
  taskQueue: string;
  connection: TemporalConnectionOptions;
  version: WorkerVersion;
};

const DEFAULT_ADDRESS = '127.0.0.1:7233';

export function loadTemporalSettings(env: NodeJS.ProcessEnv = process.env): TemporalSettings {
  // An empty TEMPORAL_TLS_CLIENT_KEY_PATH is unset: envconfig would try to read the file ''.
  const strings = setSettings(env);
  const file = strings.TEMPORAL_CONFIG_FILE;
  // envconfig ignores a config file that is not there and connects to its defaults instead.
  if (file && !existsSync(file))
    throw new ConfigError(`TEMPORAL_CONFIG_FILE: ${file} does not exist; name the TOML profile file, or unset it`);
  let profile: ClientConfigProfile;
  try {
    // No config file unless TEMPORAL_CONFIG_FILE names one: a developer's ~/.config/temporalio
    // profile must not silently redirect a gateway.
    profile = loadClientConfigProfile({ overrideEnvVars: strings, disableFile: !file });
  } catch (err) {
    throw new Error(
      `invalid configuration: Temporal connection (TEMPORAL_* or TEMPORAL_CONFIG_FILE): ${(err as Error).message.split('\n')[0]}`,
      { cause: err },
    );
  }
  const problems = settingsProblems(profile);
  if (problems.length) throw new ConfigError(problems);
  const loaded = toClientOptions(profile);
  const options = loaded.connectionOptions;
  const connection: TemporalConnectionOptions = { address: options.address ?? DEFAULT_ADDRESS };
  if (options.tls !== undefined && options.tls !== null) connection.tls = options.tls as TLSConfig | boolean;
  if (typeof options.apiKey === 'string' && options.apiKey) connection.apiKey = options.apiKey;
  if (options.metadata && Object.keys(options.metadata).length)
    connection.metadata = options.metadata as Record<string, string>;
  return { namespace: loaded.namespace || 'default', connection };
}

/** What envconfig would otherwise drop or do silently: half a client certificate pair, an API key in clear. */
function settingsProblems(profile: ClientConfigProfile): string[] {
  const problems: string[] = [];
  const tls = profile.tls;
  if (tls && !tls.disabled && Boolean(tls.clientCert) !== Boolean(tls.clientKey)) {
    const [given, missing] = tls.clientCert ? ['CERT', 'KEY'] : ['KEY', 'CERT'];
    problems.push(
      `TEMPORAL_TLS_CLIENT_${missing}_PATH: TEMPORAL_TLS_CLIENT_${given}_PATH is set without it; mutual TLS needs both (or neither, for server TLS only)`,
    );
  }
  if (profile.apiKey !== undefined && tls?.disabled)
    problems.push(
      'TEMPORAL_TLS: false would send TEMPORAL_API_KEY over plaintext gRPC; an API key needs TLS (unset TEMPORAL_TLS or set it to true)',
    );
  return problems;
}

/** How the connection is secured, for logs and banners (never the key or certificates). */
export function describeConnection(connection: TemporalConnectionOptions): string {
  const tls = connection.tls;
  const mode = !tls ? 'plain' : typeof tls === 'object' && tls.clientCertPair ? 'mutual TLS' : 'TLS';
  return `${connection.address} (${mode}${connection.apiKey ? ', API key' : ''})`;
}
