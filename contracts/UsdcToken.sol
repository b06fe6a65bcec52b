// SPDX-License-Identifier: MIT
pragma solidity ^0.8.27;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {ERC3009} from "@openzeppelin/contracts/token/ERC20/extensions/draft-ERC3009.sol";
import {Ownable} from "@openzeppelin/contracts/access/Ownable.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";

/// @title Local stand-in for USDC on Base (Circle FiatToken v2.2)
/// @notice Exists so the gateway and facilitator can settle real EIP-3009 authorizations on a
/// local anvil chain. Everything a payer signs or a facilitator calls matches real USDC: the
/// EIP-712 domain ("USD Coin", "2"), the EIP-3009 typehashes, random bytes32 nonces, 6 decimals,
/// and both the (v,r,s) and `bytes signature` overloads. So an authorization built for this token
/// is built exactly as for Base mainnet, with only chainId and verifyingContract differing.
/// @dev Not copied: FiatToken's proxy, pause, blacklist and minter roles (one owner mints here),
/// and its revert strings ("FiatTokenV2: ..."): OpenZeppelin reverts with custom errors instead,
/// so callers must not classify failures by matching revert text.
contract UsdcToken is ERC3009, Ownable {
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
    function DOMAIN_SEPARATOR() external view returns (bytes32) {
        return _domainSeparatorV4();
    }

    /// @notice Test money: only the deployer (anvil dev account 0) can create it.
    function mint(address to, uint256 value) external onlyOwner {
        _mint(to, value);
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
