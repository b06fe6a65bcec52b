import { Migration20261122000000_init } from './Migration20261122000000_init.ts';

// Order matters: this list is the migration history.
export const gatewayMigrations = [
  { name: 'Migration20261122000000_init', class: Migration20261122000000_init },
];
