// SPDX-License-Identifier: MIT
pragma solidity ^0.8.27;

import {IERC1271} from "@openzeppelin/contracts/interfaces/IERC1271.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";

/// @title Minimal ERC-1271 smart-contract wallet, for tests of contract-wallet payments
/// @notice One owner key. A signature is valid when the owner signed the digest itself: either
/// the plain 65-byte ECDSA signature (as a Safe with one owner answers), or that signature
/// wrapped as `abi.encode(bytes)` (longer than 65 bytes, as most smart wallets' formats are).
/// The EIP-3009 token asks `isValidSignature(digest, signature)` through SignatureChecker for
/// any `from` that has code, so the wallet pays with authorizations its owner signs.
contract SmartWallet is IERC1271 {
    address public immutable owner;

    constructor(address owner_) {
        owner = owner_;
    }

    function isValidSignature(bytes32 hash, bytes calldata signature) external view returns (bytes4) {
        bytes memory ownerSignature = signature.length == 65 ? signature : abi.decode(signature, (bytes));
        (address recovered, ECDSA.RecoverError err, ) = ECDSA.tryRecover(hash, ownerSignature);
        return err == ECDSA.RecoverError.NoError && recovered == owner ? IERC1271.isValidSignature.selector : bytes4(0xffffffff);
    }
}
