// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.20;

/// A Chainlink AggregatorV3-style price feed for tests: `decimals()` and
/// `latestRoundData()` as the real feeds answer them; the answer and its `updatedAt` are
/// set by anyone with `set`.
contract TestAggregator {
    uint8 public immutable decimals;
    int256 private answer;
    uint256 private updatedAt;
    uint80 private round;

    constructor(uint8 d) {
        decimals = d;
    }

    function set(int256 a, uint256 at) external {
        answer = a;
        updatedAt = at;
        round += 1;
    }

    function latestRoundData()
        external
        view
        returns (uint80 roundId, int256 price, uint256 startedAt, uint256 updated, uint80 answeredInRound)
    {
        return (round, answer, updatedAt, updatedAt, round);
    }
}
