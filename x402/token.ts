// The token a deployment is paid in, as EVM schemes sign for it: its EIP-712 domain.

/** The token's EIP-712 domain (for USDC on Base: "USD Coin", "2", 8453, the contract). */
export type TokenDomain = { name: string; version: string; chainId: number; verifyingContract: string };
