// `npm run receipt-keys -- list|init|rotate`: the receipt signing keys in RECEIPT_KEYS_DIR
// (default DATA_DIR/receipt-keys). `init` makes the first key of a deployment's folder, before
// its APIs and gateway workers start (they make none of their own there); it does nothing to a
// folder that has keys, so a deployment script may run it every time. `rotate` adds a new key, which becomes the active one
// (the newest) unless RECEIPT_ACTIVE_KID pins another; older keys stay published so the
// receipts they signed keep verifying. Remove an old key file only when none of its
// receipts need verifying any more.
import { generateKey, readKeys } from '../gateway/receipts/keys.ts';
import { loadReceiptConfig } from '../gateway/receipts/config.ts';

import { parseCommand, runCommand, usageExit } from './lib/cli.ts';
import { announceDataDir } from './lib/secrets.ts';

const USAGE = `usage: npm run receipt-keys -- [list|init|rotate]
  list    the signing keys in RECEIPT_KEYS_DIR (default DATA_DIR/receipt-keys), the active one marked
  init    makes the first key when the folder has none (before the APIs and workers start); else nothing
  rotate  adds a new key, which becomes the active one unless RECEIPT_ACTIVE_KID pins another`;
const { positionals } = parseCommand({ usage: USAGE, allowPositionals: true });
const command = positionals[0] ?? 'list';
if (positionals.length > 1 || !['list', 'init', 'rotate'].includes(command))
  usageExit(USAGE, `unknown command: ${positionals.join(' ')}`);

await runCommand('receipt-keys', async () => {
  const config = loadReceiptConfig(process.env);
  if (!process.env.RECEIPT_KEYS_DIR) announceDataDir('receipt-keys');
  if (command === 'rotate' || (command === 'init' && readKeys(config.keysDir).length === 0))
    process.stdout.write(`added ${generateKey(config.keysDir)}\n`);
  const keys = readKeys(config.keysDir);
  const active = config.activeKid ?? keys.at(-1)?.kid;
  for (const key of keys) process.stdout.write(`${key.kid}${key.kid === active ? '  (active)' : ''}\n`);
  if (keys.length === 0)
    process.stdout.write(`no keys in ${config.keysDir} (npm run receipt-keys -- init makes the first)\n`);
});
