// The development gas wallet, and the development receiver authorizer of batch-settlement channels:
// each a fresh key generated on first start, kept as an ethers JSON keystore (scrypt) with a
// random password in a 0600 file beside it, both in the data folder.
// Its scrypt cost is light (N = 2^12, not ethers' 2^17): the password lies beside the file, so a
// costly KDF protects nothing, while every facilitator process that starts on it (the test suite
// starts many) paid ~1 s of CPU to decrypt it, over 3 s on a loaded 2-core machine.
// `npm start` and the tests fund the gas wallet on their own anvil (the authorizer only signs, it
// holds nothing). Production deployments bring their own keystores (FACILITATOR_KEYSTORE_FILE,
// FACILITATOR_AUTHORIZER_KEYSTORE_FILE) or other signers.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { JsonRpcProvider, Wallet, encryptKeystoreJson, getAddress, parseEther, toQuantity } from 'ethers';

export type DevGasWallet = { keystoreFile: string; passwordFile: string; address: string };

const DEV_SCRYPT_N = 1 << 12;

/** The key kept in `dir` as `name`.json and `name`.password, made on first use. */
export async function ensureDevGasWallet(dir: string, name = 'gas-wallet'): Promise<DevGasWallet> {
  const keystoreFile = join(dir, `${name}.json`);
  const passwordFile = join(dir, `${name}.password`);
  if (!existsSync(keystoreFile) || !existsSync(passwordFile)) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const password = randomBytes(24).toString('base64url');
    const wallet = new Wallet(`0x${randomBytes(32).toString('hex')}`);
    const json = await encryptKeystoreJson({ address: wallet.address, privateKey: wallet.privateKey }, password, {
      scrypt: { N: DEV_SCRYPT_N },
    });
    // Password first, keystore last (renamed into place): a half-written pair is never used.
    writeFileSync(passwordFile, password, { mode: 0o600 });
    writeFileSync(`${keystoreFile}.tmp`, json, { mode: 0o600 });
    renameSync(`${keystoreFile}.tmp`, keystoreFile);
  }
  const { address } = JSON.parse(readFileSync(keystoreFile, 'utf8')) as { address: string };
  return { keystoreFile, passwordFile, address: getAddress(address.startsWith('0x') ? address : `0x${address}`) };
}

/** Tops the wallet up to `eth` on an anvil chain (anvil_setBalance) when it holds less than half of that. */
export async function fundDevGasWallet(rpcUrl: string, chainId: number, address: string, eth = '100'): Promise<void> {
  const provider = new JsonRpcProvider(rpcUrl, chainId, { staticNetwork: true });
  try {
    const target = parseEther(eth);
    if ((await provider.getBalance(address)) < target / 2n)
      await provider.send('anvil_setBalance', [address, toQuantity(target)]);
  } finally {
    provider.destroy();
  }
}
