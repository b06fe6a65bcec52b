// The gas wallet that submits settlements. An interface, so a KMS or HSM signer can replace
// the shipped one; the shipped one decrypts an ethers JSON keystore once, at worker start.
// The facilitator never holds a payer's key: payers sign authorizations, this wallet only
// pays gas to submit them.
import { Wallet, type HDNodeWallet, type TransactionRequest } from 'ethers';
import { keystorePassword, readKeystore, type FacilitatorConfig } from './config.ts';
import { ConfigError, exitWithProblems, problemsOf } from '../lib/config.ts';

export interface TransactionSigner {
  readonly address: string;
  /** Signs a fully populated transaction (nonce, gas, fees, chainId) and returns the raw bytes. */
  signTransaction(tx: TransactionRequest): Promise<string>;
}

/**
 * Decrypts the keystore. Every failure is a ConfigError naming the variable to fix: the file,
 * its address field and the password are checked first, so a wrong password is the only
 * reason left when decryption fails.
 */
export async function loadKeystoreSigner(config: FacilitatorConfig): Promise<TransactionSigner> {
  const { json } = readKeystore(config);
  const secret = keystorePassword(config);
  let wallet: Wallet | HDNodeWallet;
  try {
    wallet = await Wallet.fromEncryptedJson(json, secret);
  } catch {
    // Never echo the password or the decryption detail.
    const source =
      config.keystore.password !== undefined ? 'FACILITATOR_KEYSTORE_PASSWORD' : 'FACILITATOR_KEYSTORE_PASSWORD_FILE';
    throw new ConfigError(
      `${source}: it does not decrypt FACILITATOR_KEYSTORE_FILE (a wrong password, or another wallet's file)`,
    );
  }
  return {
    address: wallet.address,
    signTransaction: (tx) => wallet.signTransaction(tx),
  };
}

/** loadKeystoreSigner for a process entry: a key it cannot load ends the process, one line, exit 2. */
export function loadKeystoreSignerOrExit(processName: string, config: FacilitatorConfig): Promise<TransactionSigner> {
  return loadKeystoreSigner(config).catch((err: unknown) => exitWithProblems(processName, problemsOf(err)));
}
