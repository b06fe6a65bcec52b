// SPDX-License-Identifier: MIT
pragma solidity ^0.8.27;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {ERC3009} from "@openzeppelin/contracts/token/ERC20/extensions/draft-ERC3009.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";
import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";
import {Nonces} from "@openzeppelin/contracts/utils/Nonces.sol";

/// @title Local stand-in for USDC on Base (Circle FiatToken v2.2)
/// @notice Exists so the gateway and facilitator can settle real EIP-3009 authorizations on a
/// local anvil chain. Everything a payer signs or a facilitator calls matches real USDC: the
/// EIP-712 domain ("USD Coin", "2"), the EIP-3009 typehashes, random bytes32 nonces, 6 decimals,
/// and both the (v,r,s) and `bytes signature` overloads; EIP-2612 `permit` and `nonces` under the
/// same domain (what the x402 `eip2612GasSponsoring` extension signs to approve Permit2). So an
/// authorization built for this token is built exactly as for Base mainnet, with only chainId and
/// verifyingContract differing.
/// @dev Not copied: FiatToken's proxy, pause, blacklist and minter roles (one owner mints here),
/// and its revert strings ("FiatTokenV2: ..."): OpenZeppelin reverts with custom errors instead,
/// so callers must not classify failures by matching revert text.
contract UsdcToken is ERC3009, IERC20Permit, Nonces, Ownable {
    // EIP-2612's typehash. OpenZeppelin's ERC20Permit is not inherited: its constructor fixes the
    // EIP-712 version to "1", where USDC signs permits under the same ("USD Coin", "2") domain as
    // its EIP-3009 authorizations.
    bytes32 private constant PERMIT_TYPEHASH =
        keccak256("Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)");

    /// @dev The permit's deadline has passed (OpenZeppelin ERC20Permit's error).
    error ERC2612ExpiredSignature(uint256 deadline);
    /// @dev The signature is not the owner's (neither its ECDSA key nor, for a contract, ERC-1271).
    error ERC2612InvalidSignature(address owner);

    // OpenZeppelin's ERC3009 supplies the typehashes, authorizationState, the (v,r,s) entry points,
    // the validAfter/validBefore window and the AuthorizationUsed/AuthorizationCanceled events.
    constructor() ERC20("USD Coin", "USDC") EIP712("USD Coin", "2") Ownable(msg.sender) {}

    /// @dev USDC amounts are in micro-dollars; x402 `maxAmountRequired` values assume 6 decimals.
    function decimals() public pure override returns (uint8) {
        return 6;
    }

    /// @dev FiatToken exposes its EIP-712 version; x402 clients read it when a challenge omits `extra`.
    function version() external pure returns (string memory) {
        return "2";
    }

    /// @dev FiatToken exposes the separator directly (predates ERC-5267 `eip712Domain()`).
    // solhint-disable-next-line func-name-mixedcase
    function DOMAIN_SEPARATOR() external view override returns (bytes32) {
        return _domainSeparatorV4();
    }

    /// @notice Test money: only the deployer (anvil dev account 0) can create it.
    function mint(address to, uint256 value) external onlyOwner {
        _mint(to, value);
    }

    /// @notice EIP-2612: `owner` approves `spender` for `value` by signature; anyone may submit it.
    function permit(
        address owner,
        address spender,
        uint256 value,
        uint256 deadline,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external override {
        _permit(owner, spender, value, deadline, abi.encodePacked(r, s, v));
    }

    /// @notice FiatToken v2.2's `bytes signature` form of `permit`, which contract wallets can use.
    function permit(address owner, address spender, uint256 value, uint256 deadline, bytes memory signature) external {
        _permit(owner, spender, value, deadline, signature);
    }

    function nonces(address owner) public view override(IERC20Permit, Nonces) returns (uint256) {
        return super.nonces(owner);
    }

    // As FiatToken v2.2: the signer is checked with SignatureChecker, so an ERC-1271 wallet can
    // permit as it can authorize transfers; the nonce is the owner's next sequential one.
    function _permit(address owner, address spender, uint256 value, uint256 deadline, bytes memory signature) private {
        require(block.timestamp <= deadline, ERC2612ExpiredSignature(deadline));
        bytes32 structHash = keccak256(abi.encode(PERMIT_TYPEHASH, owner, spender, value, _useNonce(owner), deadline));
        require(
            SignatureChecker.isValidSignatureNow(owner, _hashTypedDataV4(structHash), signature),
            ERC2612InvalidSignature(owner)
        );
        _approve(owner, spender, value);
    }

    // FiatToken v2.2 also takes a packed `bytes signature`, which is what x402 payloads carry and
    // what lets smart-contract wallets pay (ERC-1271 via SignatureChecker). OpenZeppelin's own
    // bytes-signature variant (ERC20TransferAuthorization) switches to keyed sequential nonces,
    // which random x402 nonces would fail, so the three overloads are added here on top of ERC3009.

    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        bytes32 structHash = keccak256(
            abi.encode(TRANSFER_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce)
        );
        _requireSignedBy(from, structHash, signature);
        _transferWithAuthorization(from, to, value, validAfter, validBefore, nonce);
    }

    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        bytes32 structHash = keccak256(
            abi.encode(RECEIVE_WITH_AUTHORIZATION_TYPEHASH, from, to, value, validAfter, validBefore, nonce)
        );
        _requireSignedBy(from, structHash, signature);
        // Only the payee may submit, so a front-runner cannot redirect the pull (EIP-3009 rationale).
        require(to == _msgSender(), ERC20InvalidReceiver(to));
        _transferWithAuthorization(from, to, value, validAfter, validBefore, nonce);
    }

    function cancelAuthorization(address authorizer, bytes32 nonce, bytes memory signature) external {
        _requireSignedBy(authorizer, keccak256(abi.encode(CANCEL_AUTHORIZATION_TYPEHASH, authorizer, nonce)), signature);
        _cancelAuthorization(authorizer, nonce);
    }

    function _requireSignedBy(address signer, bytes32 structHash, bytes memory signature) private view {
        require(
            SignatureChecker.isValidSignatureNow(signer, _hashTypedDataV4(structHash), signature),
            ERC3009InvalidSignature()
        );
    }
}
