// The gas wallet that submits settlements. An interface, so a KMS or HSM signer can replace
// the shipped one; the shipped one decrypts an ethers JSON keystore once, at worker start.
// The facilitator never holds a payer's key: payers sign authorizations, this wallet only
// pays gas to submit them.
import { readFileSync } from 'node:fs';
import { Wallet, type HDNodeWallet, type TransactionRequest } from 'ethers';
import { gasWalletAddress, keystorePassword, type FacilitatorConfig } from './config.ts';
import { ConfigError } from '../lib/config.ts';

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
  gasWalletAddress(config);
  const secret = keystorePassword(config);
  let wallet: Wallet | HDNodeWallet;
  try {
    wallet = await Wallet.fromEncryptedJson(readFileSync(config.keystore.file!, 'utf8'), secret);
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
