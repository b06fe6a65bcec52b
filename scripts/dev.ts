// `npm run dev -- fund ADDRESS [AMOUNT]`: development conveniences against the system `npm start`
// runs. `fund` mints the dev token (the local USDC stand-in) to a payer on the local anvil
// chain, AMOUNT in USDC (default 100; up to 6 decimals). The chain is CHAIN_RPC_URL, else anvil
// on ANVIL_PORT (default 8545); the token TOKEN_ADDRESS, else the address npm start deploys it
// at. Anything but anvil is refused: the minter is a dev account only anvil signs for.
import { formatUnits, getAddress, isAddress, parseUnits } from 'ethers';
import { DEV_TOKEN_ADDRESS, devChainRpcUrl, fundOnDevChain } from './dev/chain.ts';
import { parseCommand, runCommand, usageExit } from './lib/cli.ts';

const USAGE = `usage: npm run dev -- fund ADDRESS [AMOUNT]
  fund   mints AMOUNT (default 100) of the dev USDC token to ADDRESS on the local anvil chain of
         npm start (CHAIN_RPC_URL, else ANVIL_PORT, default 8545; token TOKEN_ADDRESS, else npm
         start's) and prints the new balance`;
const { positionals } = parseCommand({ usage: USAGE, allowPositionals: true });
const [command, address, amountText = '100', ...extra] = positionals;
if (command !== 'fund') usageExit(USAGE, command ? `unknown command ${command}` : 'name a command (fund)');
if (!address) usageExit(USAGE, 'fund needs the ADDRESS of the payer');
if (extra.length) usageExit(USAGE, `unexpected ${extra.join(' ')}`);
if (!isAddress(address)) usageExit(USAGE, `${address} is not an address (0x and 40 hex digits)`);
if (!/^\d{1,12}(\.\d{1,6})?$/.test(amountText) || Number(amountText) === 0)
  usageExit(USAGE, `${amountText} is not an amount of USDC (e.g. 100 or 2.5; at most 6 decimals)`);
const to = getAddress(address);
const usdc = parseUnits(amountText, 6);

await runCommand('dev', async () => {
  const rpcUrl = devChainRpcUrl();
  const token = process.env.TOKEN_ADDRESS || DEV_TOKEN_ADDRESS;
  const balance = await fundOnDevChain(rpcUrl, token, to, usdc);
  process.stdout.write(
    `funded ${to} with ${amountText} USDC on ${rpcUrl} (token ${token}); balance ${formatUnits(balance, 6)} USDC\n`,
  );
});
