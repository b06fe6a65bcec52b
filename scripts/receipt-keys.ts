// `npm run receipt-keys -- list|rotate`: the receipt signing keys in RECEIPT_KEYS_DIR
// (default DATA_DIR/receipt-keys). `rotate` adds a new key, which becomes the active one
// (the newest) unless RECEIPT_ACTIVE_KID pins another; older keys stay published so the
// receipts they signed keep verifying. Remove an old key file only when none of its
// receipts need verifying any more.
import { generateKey, readKeys } from '../gateway/receipts/keys.ts';
import { loadReceiptConfig } from '../gateway/receipts/config.ts';

import { parseCommand, runCommand, usageExit } from './lib/cli.ts';
import { announceDataDir } from './lib/secrets.ts';

const USAGE = `usage: npm run receipt-keys -- [list|rotate]
  list    the signing keys in RECEIPT_KEYS_DIR (default DATA_DIR/receipt-keys), the active one marked
  rotate  adds a new key, which becomes the active one unless RECEIPT_ACTIVE_KID pins another`;
const { positionals } = parseCommand({ usage: USAGE, allowPositionals: true });
const command = positionals[0] ?? 'list';
if (positionals.length > 1 || (command !== 'list' && command !== 'rotate'))
  usageExit(USAGE, `unknown command: ${positionals.join(' ')}`);

await runCommand('receipt-keys', async () => {
  const config = loadReceiptConfig(process.env);
  if (!process.env.RECEIPT_KEYS_DIR) announceDataDir('receipt-keys');
  if (command === 'rotate') process.stdout.write(`added ${generateKey(config.keysDir)}\n`);
  const keys = readKeys(config.keysDir);
  const active = config.activeKid ?? keys.at(-1)?.kid;
  for (const key of keys) process.stdout.write(`${key.kid}${key.kid === active ? '  (active)' : ''}\n`);
  if (keys.length === 0)
    process.stdout.write(`no keys in ${config.keysDir} (the worker creates one on its first receipt)\n`);
});
