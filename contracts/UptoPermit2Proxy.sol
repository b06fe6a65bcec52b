// SPDX-License-Identifier: MIT
pragma solidity ^0.8.27;

import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";

/// @dev The part of Permit2's published ISignatureTransfer this proxy calls.
interface ISignatureTransfer {
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

    function permitWitnessTransferFrom(
        PermitTransferFrom memory permit,
        SignatureTransferDetails calldata transferDetails,
        address owner,
        bytes32 witness,
        string calldata witnessTypeString,
        bytes calldata signature
    ) external;
}

/// @title The x402 `upto` settlement proxy, for the local chain
/// @notice Written for this project from the x402 `upto` EVM scheme's published interface (the ABI
/// the x402 EVM package calls): the payer signs a Permit2 witness transfer of at most `permitted.amount` with
/// this contract as spender and a witness (to, facilitator, validAfter); the facilitator named in the
/// witness settles the actual amount, which Permit2 sends to `witness.to`. The local chain places
/// it at the canonical 0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002, where unmodified clients point.
/// @dev Placed with anvil_setCode, so no constructor runs: Permit2's address is a constant, and the
/// reentrancy guard uses transient storage, which needs no initialisation.
contract UptoPermit2Proxy is ReentrancyGuardTransient {
    /// @dev Permit2's canonical address, the same on every chain.
    ISignatureTransfer private constant CANONICAL_PERMIT2 = ISignatureTransfer(0x000000000022D473030F116dDEE9F6B43aC78BA3);

    /// @notice The witness type as Permit2 appends it to its PermitWitnessTransferFrom stub
    /// (referenced types in alphabetical order after the witness field).
    string public constant WITNESS_TYPE_STRING =
        "Witness witness)TokenPermissions(address token,uint256 amount)Witness(address to,address facilitator,uint256 validAfter)";
    bytes32 public constant WITNESS_TYPEHASH = keccak256("Witness(address to,address facilitator,uint256 validAfter)");

    /// @notice What the payer binds into the signature besides the permit: where the money goes,
    /// who may settle it, and from when.
    struct Witness {
        address to;
        address facilitator;
        uint256 validAfter;
    }

    /// @notice An EIP-2612 permit of the payer's token for Permit2 (the eip2612GasSponsoring extension).
    struct EIP2612Permit {
        uint256 value;
        uint256 deadline;
        bytes32 r;
        bytes32 s;
        uint8 v;
    }

    event Settled();
    event SettledWithPermit();
    /// @notice The token's permit() failed; settlement goes on (an allowance may already exist).
    event EIP2612PermitFailedWithReason(address indexed token, address indexed owner, string reason);
    event EIP2612PermitFailedWithPanic(address indexed token, address indexed owner, uint256 errorCode);
    event EIP2612PermitFailedWithData(address indexed token, address indexed owner, bytes data);

    error AmountExceedsPermitted();
    error UnauthorizedFacilitator();
    error InvalidAmount();
    error InvalidOwner();
    error InvalidDestination();
    error PaymentTooEarly();
    error Permit2612AmountMismatch();

    // solhint-disable-next-line func-name-mixedcase
    function PERMIT2() external pure returns (ISignatureTransfer) {
        return CANONICAL_PERMIT2;
    }

    /// @notice Transfers `amount` (0 < amount <= permit.permitted.amount) from `owner` to `witness.to`.
    /// Only `witness.facilitator` may call it; Permit2 checks the signature, deadline and nonce.
    function settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        _settle(permit, amount, owner, witness, signature);
        emit Settled();
    }

    /// @notice As settle, after submitting the payer's EIP-2612 permit approving Permit2 for the
    /// permitted amount. A failing permit() is reported in an event, not a revert: the approval
    /// may already be in place (someone submitted the permit first), in which case the transfer works.
    function settleWithPermit(
        EIP2612Permit calldata permit2612,
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) external nonReentrant {
        if (permit2612.value != permit.permitted.amount) revert Permit2612AmountMismatch();
        address token = permit.permitted.token;
        try IERC20Permit(token).permit(
            owner, address(CANONICAL_PERMIT2), permit2612.value, permit2612.deadline, permit2612.v, permit2612.r, permit2612.s
        ) {
            // approved
        } catch Error(string memory reason) {
            emit EIP2612PermitFailedWithReason(token, owner, reason);
        } catch Panic(uint256 errorCode) {
            emit EIP2612PermitFailedWithPanic(token, owner, errorCode);
        } catch (bytes memory data) {
            emit EIP2612PermitFailedWithData(token, owner, data);
        }
        _settle(permit, amount, owner, witness, signature);
        emit SettledWithPermit();
    }

    function _settle(
        ISignatureTransfer.PermitTransferFrom calldata permit,
        uint256 amount,
        address owner,
        Witness calldata witness,
        bytes calldata signature
    ) private {
        if (amount == 0) revert InvalidAmount();
        if (amount > permit.permitted.amount) revert AmountExceedsPermitted();
        if (msg.sender != witness.facilitator) revert UnauthorizedFacilitator();
        if (owner == address(0)) revert InvalidOwner();
        if (witness.to == address(0)) revert InvalidDestination();
        if (block.timestamp < witness.validAfter) revert PaymentTooEarly();
        bytes32 witnessHash = keccak256(abi.encode(WITNESS_TYPEHASH, witness.to, witness.facilitator, witness.validAfter));
        CANONICAL_PERMIT2.permitWitnessTransferFrom(
            permit,
            ISignatureTransfer.SignatureTransferDetails({to: witness.to, requestedAmount: amount}),
            owner,
            witnessHash,
            WITNESS_TYPE_STRING,
            signature
        );
    }
}
