// SPDX-License-Identifier: Apache-2.0
pragma solidity 0.8.37;

// Keyless deposit addresses (DECISIONS.md section 9, CHAINS.md "EVM deposit addresses").
//
// A customer's deposit address is the CREATE2 address of a `Forwarder` deployed by the
// `ForwarderFactory` under salt keccak256(project id ‖ customer id). The forwarder takes no
// constructor arguments, so its address depends only on (factory, salt) and is the same on
// every EVM chain where the factory sits at the same address. Funds can only ever move to
// the factory's `treasury` (the appliance's master wallet), so flushing needs no access
// control: anyone may pay the gas to move funds home.

interface IForwarderFactory {
    function treasury() external view returns (address);
}

interface IERC20Balance {
    function balanceOf(address owner) external view returns (uint256);
}

contract Forwarder {
    address private immutable factory;

    constructor() {
        factory = msg.sender;
    }

    // Empty on purpose: a plain transfer forwarding only 2,300 gas (Solidity `transfer`,
    // many exchanges) must succeed, which rules out minimal-proxy clones.
    receive() external payable {}

    /// Moves this address's whole balance of `token` (address(0): the native coin) to the
    /// treasury. Tokens that return no bool from `transfer` (USDT on Ethereum) are accepted.
    function flush(address token) external {
        address to = IForwarderFactory(factory).treasury();
        if (token == address(0)) {
            uint256 amount = address(this).balance;
            if (amount > 0) {
                (bool ok, ) = to.call{value: amount}("");
                require(ok, "native transfer failed");
            }
        } else {
            uint256 amount = IERC20Balance(token).balanceOf(address(this));
            if (amount > 0) {
                (bool ok, bytes memory ret) = token.call(
                    abi.encodeWithSelector(0xa9059cbb, to, amount)
                );
                require(ok && (ret.length == 0 || abi.decode(ret, (bool))), "token transfer failed");
            }
        }
    }
}

contract ForwarderFactory {
    /// Where every forwarder sends its funds. Part of the factory's init code, so the
    /// factory address (deployed through the deterministic deployment proxy) is a function
    /// of the treasury alone and is the same on every EVM chain.
    address public immutable treasury;

    constructor(address treasury_) {
        require(treasury_ != address(0), "zero treasury");
        treasury = treasury_;
    }

    /// The forwarder address of `salt` (deployed or not).
    function forwarderAddress(bytes32 salt) public view returns (address) {
        bytes32 h = keccak256(
            abi.encodePacked(bytes1(0xff), address(this), salt, keccak256(type(Forwarder).creationCode))
        );
        return address(uint160(uint256(h)));
    }

    /// Deploys the forwarder of `salt` if it has no code yet, then flushes each of `tokens`
    /// (address(0): the native coin) to the treasury. One transaction per sweep.
    function sweep(bytes32 salt, address[] calldata tokens) external {
        address f = forwarderAddress(salt);
        if (f.code.length == 0) {
            new Forwarder{salt: salt}();
        }
        for (uint256 i = 0; i < tokens.length; i++) {
            Forwarder(payable(f)).flush(tokens[i]);
        }
    }
}
