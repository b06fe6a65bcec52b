// Proves the local chain through a real anvil: deployment is deterministic and idempotent, and the
// token settles EIP-3009 authorizations exactly once, as USDC on Base does.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  HDNodeWallet,
  Interface,
  JsonRpcProvider,
  Signature,
  TypedDataEncoder,
  Wallet,
  getCreateAddress,
  hexlify,
  parseEther,
  parseUnits,
  type Contract,
} from 'ethers';
import {
  CHAIN_ID,
  DEV_ACCOUNTS,
  TOKEN_ABI,
  deployToken,
  fund,
  startAnvil,
  tokenContract,
  type RunningAnvil,
} from '../../scripts/dev/chain.ts';
import { compileToken } from '../../scripts/dev/compile.ts';

const CACHE_DIR = fileURLToPath(new URL('../../.test-data/contracts', import.meta.url));
const TRANSFER_TYPES = {
  TransferWithAuthorization: [
    { name: 'from', type: 'address' },
    { name: 'to', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'validAfter', type: 'uint256' },
    { name: 'validBefore', type: 'uint256' },
    { name: 'nonce', type: 'bytes32' },
  ],
};
const CANCEL_TYPES = {
  CancelAuthorization: [
    { name: 'authorizer', type: 'address' },
    { name: 'nonce', type: 'bytes32' },
  ],
};

describe('local chain (anvil + USDC stand-in)', function () {
  let anvil: RunningAnvil;
  let provider: JsonRpcProvider;
  let tokenAddress: string;
  let domain: { name: string; version: string; chainId: number; verifyingContract: string };
  const payer = new Wallet(DEV_ACCOUNTS[1].privateKey);
  const payee = DEV_ACCOUNTS[3].address;
  let facilitator: Wallet; // submits and pays gas, as the settlement facilitator does

  before(async function () {
    anvil = await startAnvil({ port: await freePort() });
    // cacheTimeout -1: ethers otherwise reuses a nonce lookup for 250 ms, and these tests send faster than that.
    provider = new JsonRpcProvider(anvil.rpcUrl, CHAIN_ID, { staticNetwork: true, cacheTimeout: -1 });
    facilitator = new Wallet(DEV_ACCOUNTS[2].privateKey, provider);
    tokenAddress = (await deployToken(anvil.rpcUrl, CACHE_DIR)).address;
    domain = { name: 'USD Coin', version: '2', chainId: CHAIN_ID, verifyingContract: tokenAddress };
    await fund(anvil.rpcUrl, tokenAddress, payer.address, { usdc: parseUnits('100', 6) });
  });

  after(async function () {
    provider?.destroy();
    await anvil?.stop();
  });

  const token = (): Contract => tokenContract(tokenAddress, facilitator);
  const balanceOf = (account: string): Promise<bigint> => token().balanceOf(account);

  async function signTransfer(signer: Wallet, overrides: { value?: bigint; validBefore?: bigint } = {}) {
    const now = BigInt((await provider.getBlock('latest'))!.timestamp);
    const authorization = {
      from: payer.address,
      to: payee,
      value: overrides.value ?? parseUnits('1.5', 6),
      validAfter: now - 600n, // as x402 clients do, to tolerate clock skew
      validBefore: overrides.validBefore ?? now + 60n,
      nonce: hexlify(randomBytes(32)),
    };
    const signature = await signer.signTypedData(domain, TRANSFER_TYPES, authorization);
    return { authorization, signature };
  }

  function submitWithVrs({ authorization: a, signature }: Awaited<ReturnType<typeof signTransfer>>) {
    const { v, r, s } = Signature.from(signature);
    return token().transferWithAuthorization(a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, v, r, s);
  }

  function submitWithBytes({ authorization: a, signature }: Awaited<ReturnType<typeof signTransfer>>) {
    return token().transferWithAuthorization(a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, signature);
  }

  // A failed send surfaces as a failed gas estimate carrying the raw revert data; the contract's ABI decodes it.
  const revertsWith = (name: string) => (err: any) => {
    const decoded = err.data ? token().interface.parseError(err.data) : null;
    assert.equal(decoded?.name, name, `expected revert ${name}, got: ${err.shortMessage ?? err.message}`);
    return true;
  };

  it('deploys the token at the address dev account 0 gets for its first contract', async function () {
    assert.equal(tokenAddress, getCreateAddress({ from: DEV_ACCOUNTS[0].address, nonce: 0 }));
    assert.equal(tokenAddress, '0x5FbDB2315678afecb367f032d93F642f64180aa3');
    const usdc = token();
    assert.equal(await usdc.name(), 'USD Coin');
    assert.equal(await usdc.symbol(), 'USDC');
    assert.equal(await usdc.decimals(), 6n);
    assert.equal(await usdc.version(), '2');
    assert.equal(await usdc.DOMAIN_SEPARATOR(), TypedDataEncoder.hashDomain(domain));
  });

  it('treats a second deployToken as a no-op returning the same address', async function () {
    const sentBefore = await provider.getTransactionCount(DEV_ACCOUNTS[0].address);
    const again = await deployToken(anvil.rpcUrl, CACHE_DIR);
    assert.deepEqual(again, { address: tokenAddress, deployer: DEV_ACCOUNTS[0].address });
    assert.equal(await provider.getTransactionCount(DEV_ACCOUNTS[0].address), sentBefore);
  });

  it('DEV_ACCOUNTS are the keys anvil derives from its public test mnemonic', function () {
    const mnemonic = 'test test test test test test test test test test test junk';
    DEV_ACCOUNTS.forEach(({ address, privateKey }, i) => {
      const derived = HDNodeWallet.fromPhrase(mnemonic, undefined, `m/44'/60'/0'/0/${i}`);
      assert.deepEqual({ address, privateKey }, { address: derived.address, privateKey: derived.privateKey });
    });
  });

  it('TOKEN_ABI lists only what the compiled contract has', async function () {
    const compiled = new Interface((await compileToken(CACHE_DIR)).abi);
    const named = compiled.fragments.filter((f) => ['function', 'event', 'error'].includes(f.type));
    const compiledSignatures = new Set(named.map((f) => f.format('sighash')));
    for (const fragment of new Interface(TOKEN_ABI).fragments) {
      assert.ok(
        compiledSignatures.has(fragment.format('sighash')),
        `not in the contract: ${fragment.format('sighash')}`,
      );
    }
  });

  it('fund mints USDC and sets the ETH balance', async function () {
    const account = Wallet.createRandom().address;
    await fund(anvil.rpcUrl, tokenAddress, account, { usdc: 2_500_000n, eth: parseEther('3') });
    await fund(anvil.rpcUrl, tokenAddress, account, { usdc: 500_000n });
    assert.equal(await balanceOf(account), 3_000_000n);
    assert.equal(await provider.getBalance(account), parseEther('3'));
  });

  it('only the deployer can mint', async function () {
    await assert.rejects(token().mint(facilitator.address, 1n), revertsWith('OwnableUnauthorizedAccount'));
  });

  it('transferWithAuthorization (v,r,s) moves the value exactly once; a replay reverts', async function () {
    const signed = await signTransfer(payer);
    const [payerBefore, payeeBefore] = [await balanceOf(payer.address), await balanceOf(payee)];
    assert.equal(await token().authorizationState(payer.address, signed.authorization.nonce), false);

    const receipt = await (await submitWithVrs(signed)).wait();
    const used = receipt.logs
      .map((log: any) => token().interface.parseLog(log))
      .find((e: any) => e?.name === 'AuthorizationUsed');
    assert.deepEqual([...used.args], [payer.address, signed.authorization.nonce]);
    assert.equal(await token().authorizationState(payer.address, signed.authorization.nonce), true);

    await assert.rejects(submitWithVrs(signed), revertsWith('ERC3009UsedAuthorization'));
    await assert.rejects(submitWithBytes(signed), revertsWith('ERC3009UsedAuthorization'));
    assert.equal(await balanceOf(payer.address), payerBefore - signed.authorization.value);
    assert.equal(await balanceOf(payee), payeeBefore + signed.authorization.value);
  });

  it('transferWithAuthorization also takes the packed bytes signature x402 payloads carry', async function () {
    const signed = await signTransfer(payer, { value: 7n });
    const payeeBefore = await balanceOf(payee);
    await (await submitWithBytes(signed)).wait();
    assert.equal(await balanceOf(payee), payeeBefore + 7n);
    await assert.rejects(submitWithVrs(signed), revertsWith('ERC3009UsedAuthorization'));
  });

  it('rejects an authorization whose validBefore has passed', async function () {
    const now = BigInt((await provider.getBlock('latest'))!.timestamp);
    const signed = await signTransfer(payer, { validBefore: now - 1n });
    await assert.rejects(submitWithVrs(signed), revertsWith('ERC3009InvalidAuthorizationTime'));
    await assert.rejects(submitWithBytes(signed), revertsWith('ERC3009InvalidAuthorizationTime'));
    assert.equal(await token().authorizationState(payer.address, signed.authorization.nonce), false);
  });

  it('rejects an authorization signed by anyone but `from`', async function () {
    const signed = await signTransfer(new Wallet(DEV_ACCOUNTS[4].privateKey));
    await assert.rejects(submitWithVrs(signed), revertsWith('ERC3009InvalidSignature'));
    await assert.rejects(submitWithBytes(signed), revertsWith('ERC3009InvalidSignature'));
  });

  it('a canceled nonce cannot be used afterwards', async function () {
    const signed = await signTransfer(payer);
    const nonce = signed.authorization.nonce;
    const cancelSignature = await payer.signTypedData(domain, CANCEL_TYPES, { authorizer: payer.address, nonce });
    await (await token().cancelAuthorization(payer.address, nonce, cancelSignature)).wait();
    assert.equal(await token().authorizationState(payer.address, nonce), true);
    await assert.rejects(submitWithBytes(signed), revertsWith('ERC3009UsedAuthorization'));
  });

  it('receiveWithAuthorization can only be submitted by the payee', async function () {
    const now = BigInt((await provider.getBlock('latest'))!.timestamp);
    const message = {
      from: payer.address,
      to: payee,
      value: 1n,
      validAfter: 0n,
      validBefore: now + 60n,
      nonce: hexlify(randomBytes(32)),
    };
    const types = { ReceiveWithAuthorization: TRANSFER_TYPES.TransferWithAuthorization };
    const signature = await payer.signTypedData(domain, types, message);
    const args = [
      message.from,
      message.to,
      message.value,
      message.validAfter,
      message.validBefore,
      message.nonce,
      signature,
    ] as const;
    await assert.rejects(token().receiveWithAuthorization(...args), revertsWith('ERC20InvalidReceiver'));
    const payeeSigner = await provider.getSigner(payee); // anvil dev accounts are unlocked
    await (await tokenContract(tokenAddress, payeeSigner).receiveWithAuthorization(...args)).wait();
    assert.equal(await token().authorizationState(payer.address, message.nonce), true);
  });

  it('refuses a port that is already taken, in one line', async function () {
    const port = Number(new URL(anvil.rpcUrl).port);
    await assert.rejects(startAnvil({ port }), /^Error: anvil: port \d+ on 127\.0\.0\.1 is already in use/);
  });

  it('keeps the token and balances across a restart with a state file', async function () {
    const stateDir = await mkdtemp(join(tmpdir(), 'anvil-state-'));
    const stateFile = join(stateDir, 'chain.json');
    const port = await freePort();
    try {
      const first = await startAnvil({ port, stateFile });
      const { address } = await deployToken(first.rpcUrl, CACHE_DIR);
      await fund(first.rpcUrl, address, payee, { usdc: 42n });
      await first.stop();

      const second = await startAnvil({ port, stateFile });
      try {
        assert.deepEqual(await deployToken(second.rpcUrl, CACHE_DIR), { address, deployer: DEV_ACCOUNTS[0].address });
        const restored = new JsonRpcProvider(second.rpcUrl, CHAIN_ID, { staticNetwork: true });
        assert.equal(await tokenContract(address, restored).balanceOf(payee), 42n);
        assert.equal(await restored.getTransactionCount(DEV_ACCOUNTS[0].address), 2); // deploy + mint, no redeploy
        restored.destroy();
      } finally {
        await second.stop();
      }
    } finally {
      await rm(stateDir, { recursive: true, force: true });
    }
  });
});

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}
