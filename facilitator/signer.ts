// The gas wallet that submits settlements. An interface, so a KMS or HSM signer can replace
// the shipped one; the shipped one decrypts an ethers JSON keystore once, at worker start.
// The facilitator never holds a payer's key: payers sign authorizations, this wallet only
// pays gas to submit them.
import { readFileSync } from 'node:fs';
import { Wallet, type HDNodeWallet, type TransactionRequest } from 'ethers';
import type { FacilitatorConfig } from './config.ts';
import { ConfigError } from '../lib/config.ts';

export interface TransactionSigner {
  readonly address: string;
  /** Signs a fully populated transaction (nonce, gas, fees, chainId) and returns the raw bytes. */
  signTransaction(tx: TransactionRequest): Promise<string>;
}

export async function loadKeystoreSigner(config: FacilitatorConfig): Promise<TransactionSigner> {
  const { file, password, passwordFile } = config.keystore;
  if (!file) throw new ConfigError('FACILITATOR_KEYSTORE_FILE must be set');
  const secret = password ?? (passwordFile ? readFileSync(passwordFile, 'utf8').trim() : undefined);
  if (secret === undefined) {
    throw new ConfigError('FACILITATOR_KEYSTORE_PASSWORD or FACILITATOR_KEYSTORE_PASSWORD_FILE must be set');
  }
  let wallet: Wallet | HDNodeWallet;
  try {
    wallet = await Wallet.fromEncryptedJson(readFileSync(file, 'utf8'), secret);
  } catch {
    // Never echo the password or the decryption detail.
    throw new Error('the gas wallet keystore could not be decrypted with the configured password');
  }
  return {
    address: wallet.address,
    signTransaction: (tx) => wallet.signTransaction(tx),
  };
}
