// SPDX-License-Identifier: MIT
pragma solidity ^0.8.27;

/// @title The part of Multicall3 the x402 batch-settlement reference facilitator uses, for the local chain
/// @notice Written for this project from Multicall3's published interface: `tryAggregate` runs
/// several calls in one and returns each one's success and data. Multicall3 sits at
/// 0xcA11bde05977b3631167028862bE2a173976CA11 on Base and nearly every EVM chain; the reference
/// facilitator reads a channel's state and the payer's balance through it, so the local chain
/// places this there.
/// @dev Stateless, no constructor: placed with anvil_setCode.
contract Multicall3 {
    struct Call {
        address target;
        bytes callData;
    }

    struct Result {
        bool success;
        bytes returnData;
    }

    /// @notice Runs `calls` in order; with `requireSuccess` a failing call reverts the whole.
    function tryAggregate(bool requireSuccess, Call[] calldata calls)
        public
        payable
        returns (Result[] memory returnData)
    {
        returnData = new Result[](calls.length);
        for (uint256 i = 0; i < calls.length; ++i) {
            (bool success, bytes memory data) = calls[i].target.call(calls[i].callData);
            if (requireSuccess) require(success, "Multicall3: call failed");
            returnData[i] = Result(success, data);
        }
    }
}
