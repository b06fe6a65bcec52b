// The Temporal client used by the API (starting workflows) and by tests and scripts.
import { Client, Connection } from '@temporalio/client';

export async function connectClient(address: string, namespace: string): Promise<Client> {
  const connection = await Connection.connect({ address, connectTimeout: '5 seconds' });
  return new Client({ connection, namespace });
}
