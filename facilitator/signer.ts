// The gas wallet that submits settlements, and the receiver authorizer that signs the claims and
// refunds of batch-settlement channels delegating that role to this facilitator. Interfaces, so
// a KMS or HSM signer can replace the shipped ones; the shipped ones decrypt an ethers JSON
// keystore each, once, at worker start. The facilitator never holds a payer's key: payers sign
// authorizations, the gas wallet only pays gas to submit them.
import { Wallet, type HDNodeWallet, type TransactionRequest } from 'ethers';
import {
  keystoreFileSetting,
  keystorePassword,
  passwordSource,
  readKeystore,
  settlesBatch,
  type FacilitatorConfig,
  type KeyName,
} from './config.ts';
import { ConfigError, exitWithProblems, problemsOf } from '../lib/config.ts';

/** Signs EIP-712 digests (ClaimBatch, Refund) as a channel's receiver authorizer. */
interface ReceiverAuthorizer {
  readonly address: string;
  /** A 65-byte signature (v 27 or 28, low s) of the 32-byte digest. */
  signDigest(digest: string): Promise<string>;
}

export interface TransactionSigner {
  readonly address: string;
  /** Signs a fully populated transaction (nonce, gas, fees, chainId) and returns the raw bytes. */
  signTransaction(tx: TransactionRequest): Promise<string>;
  /** Where batch-settlement is settled: the receiver authorizer's key, held beside the gas key. */
  readonly receiverAuthorizer?: ReceiverAuthorizer;
}

/**
 * Decrypts one keystore. Every failure is a ConfigError naming the variable to fix: the file,
 * its address field and the password are checked first, so a wrong password is the only
 * reason left when decryption fails.
 */
async function decrypt(config: FacilitatorConfig, key: KeyName): Promise<Wallet | HDNodeWallet> {
  const { json } = readKeystore(config, key);
  const secret = keystorePassword(config, key);
  try {
    return await Wallet.fromEncryptedJson(json, secret);
  } catch {
    // Never echo the password or the decryption detail.
    throw new ConfigError(
      `${passwordSource(config, key)}: it does not decrypt ${keystoreFileSetting(key)} (a wrong password, or another wallet's file)`,
    );
  }
}

/** Decrypts the gas wallet's keystore and, where batch-settlement is settled, the receiver authorizer's. */
export async function loadKeystoreSigner(config: FacilitatorConfig): Promise<TransactionSigner> {
  const [wallet, authorizer] = await Promise.all([
    decrypt(config, 'gas'),
    settlesBatch(config) ? decrypt(config, 'authorizer') : undefined,
  ]);
  return {
    address: wallet.address,
    signTransaction: (tx) => wallet.signTransaction(tx),
    ...(authorizer
      ? {
          receiverAuthorizer: {
            address: authorizer.address,
            signDigest: async (digest: string) => authorizer.signingKey.sign(digest).serialized,
          },
        }
      : {}),
  };
}

/** loadKeystoreSigner for a process entry: a key it cannot load ends the process, one line, exit 2. */
export function loadKeystoreSignerOrExit(processName: string, config: FacilitatorConfig): Promise<TransactionSigner> {
  return loadKeystoreSigner(config).catch((err: unknown) => exitWithProblems(processName, problemsOf(err)));
}
