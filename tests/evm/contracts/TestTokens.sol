// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

// Test-only tokens for the EVM end-to-end tests. `TestToken` is a plain ERC-20 returning
// bool; `TetherLike` returns nothing from transfer/transferFrom, as USDT on Ethereum does.

contract TestToken {
    /// When set, every transfer reverts (to make a mined payout fail on chain).
    bool public paused;
    string public name;
    string public symbol;
    uint8 public immutable decimals;
    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);

    constructor(uint8 decimals_) {
        name = "Test Token";
        symbol = "TEST";
        decimals = decimals_;
    }

    function mint(address to, uint256 value) external {
        totalSupply += value;
        balanceOf[to] += value;
        emit Transfer(address(0), to, value);
    }

    /// Credits `value` to each of `to`, one Transfer log each: a block full of deposits
    /// for the watcher benchmark.
    function spray(address[] calldata to, uint256 value) external {
        for (uint256 i = 0; i < to.length; i++) {
            totalSupply += value;
            balanceOf[to[i]] += value;
            emit Transfer(msg.sender, to[i], value);
        }
    }

    function setPaused(bool p) external {
        paused = p;
    }

    function _move(address from, address to, uint256 value) internal {
        require(!paused, "paused");
        require(balanceOf[from] >= value, "balance");
        balanceOf[from] -= value;
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }

    function transfer(address to, uint256 value) external returns (bool) {
        _move(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        require(allowance[from][msg.sender] >= value, "allowance");
        allowance[from][msg.sender] -= value;
        _move(from, to, value);
        return true;
    }
}

contract TetherLike {
    string public name;
    string public symbol;
    uint8 public immutable decimals;
    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;

    event Transfer(address indexed from, address indexed to, uint256 value);

    constructor(uint8 decimals_) {
        name = "Test Token";
        symbol = "TEST";
        decimals = decimals_;
    }

    function mint(address to, uint256 value) external {
        totalSupply += value;
        balanceOf[to] += value;
        emit Transfer(address(0), to, value);
    }

    // No return value, like USDT on Ethereum.
    function transfer(address to, uint256 value) external {
        require(balanceOf[msg.sender] >= value, "balance");
        balanceOf[msg.sender] -= value;
        balanceOf[to] += value;
        emit Transfer(msg.sender, to, value);
    }
}
