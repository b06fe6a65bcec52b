// SPDX-License-Identifier: MIT
pragma solidity ^0.8.27;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";

/// @title The signature-transfer half of Permit2, for the local chain
/// @notice Written for this project from Uniswap Permit2's published ISignatureTransfer interface:
/// the same function signatures, typehash strings, EIP-712 domain (name "Permit2", no version),
/// unordered bitmap nonces, events and errors, so a payer signs for it exactly as for the canonical
/// Permit2 at 0x000000000022D473030F116dDEE9F6B43aC78BA3, where the local chain places it.
/// @dev Placed with anvil_setCode, so no constructor ever runs: the domain separator is computed
/// from block.chainid and address(this) on each call and nothing is set at construction. Not
/// implemented: the batch transfers and Permit2's AllowanceTransfer half (nothing here uses them).
contract Permit2 {
    using SafeERC20 for IERC20;

    struct TokenPermissions {
        address token;
        uint256 amount;
    }

    struct PermitTransferFrom {
        TokenPermissions permitted;
        uint256 nonce;
        uint256 deadline;
    }

    struct SignatureTransferDetails {
        address to;
        uint256 requestedAmount;
    }

    bytes32 private constant DOMAIN_TYPEHASH = keccak256("EIP712Domain(string name,uint256 chainId,address verifyingContract)");
    bytes32 private constant NAME_HASH = keccak256("Permit2");
    bytes32 private constant TOKEN_PERMISSIONS_TYPEHASH = keccak256("TokenPermissions(address token,uint256 amount)");
    bytes32 private constant PERMIT_TRANSFER_FROM_TYPEHASH = keccak256(
        "PermitTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline)TokenPermissions(address token,uint256 amount)"
    );
    // A witness transfer's type is this stub followed by the caller's witnessTypeString.
    string private constant PERMIT_WITNESS_TRANSFER_FROM_STUB =
        "PermitWitnessTransferFrom(TokenPermissions permitted,address spender,uint256 nonce,uint256 deadline,";

    /// @notice Owner => word position => bitmap of used nonces (nonce = word position << 8 | bit).
    mapping(address => mapping(uint256 => uint256)) public nonceBitmap;

    event UnorderedNonceInvalidation(address indexed owner, uint256 word, uint256 mask);

    error SignatureExpired(uint256 signatureDeadline);
    error InvalidAmount(uint256 maxAmount);
    error InvalidNonce();
    error InvalidSignatureLength();
    error InvalidSignature();
    error InvalidSigner();
    error InvalidContractSignature();

    // solhint-disable-next-line func-name-mixedcase
    function DOMAIN_SEPARATOR() public view returns (bytes32) {
        return keccak256(abi.encode(DOMAIN_TYPEHASH, NAME_HASH, block.chainid, address(this)));
    }

    /// @notice Transfers `transferDetails.requestedAmount` (at most the permitted amount) of the
    /// permitted token from `owner`, who signed `permit` for msg.sender as spender.
    function permitTransferFrom(
        PermitTransferFrom memory permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes calldata signature
    ) external {
        bytes32 structHash = keccak256(
            abi.encode(PERMIT_TRANSFER_FROM_TYPEHASH, _hashPermissions(permit.permitted), msg.sender, permit.nonce, permit.deadline)
        );
        _transfer(permit, transferDetails, owner, structHash, signature);
    }

    /// @notice As permitTransferFrom, with the spender's `witness` (a struct hash of
    /// `witnessTypeString`'s type) part of what the owner signed.
    function permitWitnessTransferFrom(
        PermitTransferFrom memory permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external {
        bytes32 typeHash = keccak256(abi.encodePacked(PERMIT_WITNESS_TRANSFER_FROM_STUB, witnessTypeString));
        bytes32 structHash = keccak256(
            abi.encode(typeHash, _hashPermissions(permit.permitted), msg.sender, permit.nonce, permit.deadline, witness)
        );
        _transfer(permit, transferDetails, owner, structHash, signature);
    }

    /// @notice Marks the nonces of `mask` in word `wordPos` as used, so signatures over them can no longer transfer.
    function invalidateUnorderedNonces(uint256 wordPos, uint256 mask) external {
        nonceBitmap[msg.sender][wordPos] |= mask;
        emit UnorderedNonceInvalidation(msg.sender, wordPos, mask);
    }

    function _transfer(
        PermitTransferFrom memory permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 structHash,
        bytes calldata signature
    ) private {
        if (block.timestamp > permit.deadline) revert SignatureExpired(permit.deadline);
        if (transferDetails.requestedAmount > permit.permitted.amount) revert InvalidAmount(permit.permitted.amount);
        _useNonce(owner, permit.nonce);
        _requireSignedBy(owner, keccak256(abi.encodePacked("\x19\x01", DOMAIN_SEPARATOR(), structHash)), signature);
        IERC20(permit.permitted.token).safeTransferFrom(owner, transferDetails.to, transferDetails.requestedAmount);
    }

    function _hashPermissions(TokenPermissions memory permitted) private pure returns (bytes32) {
        return keccak256(abi.encode(TOKEN_PERMISSIONS_TYPEHASH, permitted.token, permitted.amount));
    }

    // The nonce's high 248 bits pick the word, its low 8 bits the bit; flipping a set bit is a replay.
    function _useNonce(address owner, uint256 nonce) private {
        uint256 bit = 1 << uint8(nonce);
        uint256 flipped = nonceBitmap[owner][nonce >> 8] ^= bit;
        if (flipped & bit == 0) revert InvalidNonce();
    }

    // An account without code signs with its key: 65-byte (r, s, v) or 64-byte EIP-2098 (r, vs),
    // recovered with plain ecrecover as the published Permit2 does (a high-s signature is
    // accepted there too; the nonce bitmap makes a malleated copy useless). A contract signs
    // through ERC-1271, as Permit2 accepts smart-contract wallets.
    function _requireSignedBy(address owner, bytes32 digest, bytes calldata signature) private view {
        if (owner.code.length > 0) {
            if (!SignatureChecker.isValidERC1271SignatureNow(owner, digest, signature)) revert InvalidContractSignature();
            return;
        }
        bytes32 r;
        bytes32 s;
        uint8 v;
        if (signature.length == 65) {
            r = bytes32(signature[0:32]);
            s = bytes32(signature[32:64]);
            v = uint8(signature[64]);
        } else if (signature.length == 64) {
            r = bytes32(signature[0:32]);
            bytes32 vs = bytes32(signature[32:64]);
            s = vs & bytes32(uint256(type(int256).max));
            v = uint8(uint256(vs) >> 255) + 27;
        } else {
            revert InvalidSignatureLength();
        }
        address signer = ecrecover(digest, v, r, s);
        if (signer == address(0)) revert InvalidSignature();
        if (signer != owner) revert InvalidSigner();
    }
}
