// SPDX-License-Identifier: MIT
pragma solidity ^0.8.27;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";

/// @dev The EIP-3009 pull this collector makes (the `bytes signature` form).
interface IERC3009Receive {
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external;
}

/// @title The x402 `batch-settlement` ERC-3009 deposit collector, for the local chain
/// @notice Written for this project from the published collector interface: the batch-settlement
/// contract calls `collect`, this contract pulls the deposit with the payer's
/// receiveWithAuthorization (which EIP-3009 lets only the named recipient, this contract, submit)
/// and forwards it to the batch-settlement contract. The authorization's nonce binds the channel:
/// keccak256(abi.encode(channelId, salt)). Placed at the canonical
/// 0x4020806089470a89826cB9fB1f4059150b550004.
/// @dev Placed with anvil_setCode, so no constructor runs: the batch-settlement contract's
/// canonical address is a constant.
contract ERC3009DepositCollector {
    using SafeERC20 for IERC20;

    /// @notice The only caller `collect` serves, so nobody else can spend a payer's authorization.
    address public constant x402BatchSettlement = 0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003;

    error OnlyX402BatchSettlement();

    /// @param collectorData abi.encode(uint256 validAfter, uint256 validBefore, uint256 salt, bytes signature).
    function collect(address payer, address token, uint256 amount, bytes32 channelId, bytes calldata collectorData)
        external
    {
        if (msg.sender != x402BatchSettlement) revert OnlyX402BatchSettlement();
        (uint256 validAfter, uint256 validBefore, uint256 salt, bytes memory signature) =
            abi.decode(collectorData, (uint256, uint256, uint256, bytes));
        IERC3009Receive(token).receiveWithAuthorization(
            payer, address(this), amount, validAfter, validBefore, keccak256(abi.encode(channelId, salt)), signature
        );
        IERC20(token).safeTransfer(x402BatchSettlement, amount);
    }
}
