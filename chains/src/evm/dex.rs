//! The DEX of on-chain conversions (DECISIONS.md section 14): a Uniswap-V2-compatible router
//! (quotes with `getAmountsOut`, swaps with `swapExact*`) or Uniswap V3 (quotes with
//! QuoterV2 `quoteExactInputSingle` by `eth_call`, swaps with SwapRouter
//! `exactInputSingle`). Quotes come from the DEX itself, never from computed pool addresses
//! or off-chain formulas.
//!
//! The native coin is swapped through the DEX's wrapped native token (`weth`): V2 with the
//! router's ETH entry points, V3 by sending the value with `exactInputSingle` (the router
//! wraps it) and, for a native output, `multicall(exactInputSingle, unwrapWETH9)`.
//!
//! This module builds calldata and reads quotes through the chain seam; sending, nonces and
//! the saga stay with the binary's chain worker.

use alloy::primitives::{Address, Bytes, U160, U256};
use alloy::sol;
use alloy::sol_types::SolCall;

use crate::client::{ChainClient, ClientError, TxLog};

sol! {
    /// Uniswap V2 Router02 (the calls used).
    interface IUniswapV2Router02 {
        function getAmountsOut(uint256 amountIn, address[] path) external view returns (uint256[] amounts);
        function swapExactTokensForTokens(uint256 amountIn, uint256 amountOutMin, address[] path, address to, uint256 deadline) external returns (uint256[] amounts);
        function swapExactETHForTokens(uint256 amountOutMin, address[] path, address to, uint256 deadline) external payable returns (uint256[] amounts);
        function swapExactTokensForETH(uint256 amountIn, uint256 amountOutMin, address[] path, address to, uint256 deadline) external returns (uint256[] amounts);
    }

    /// Uniswap V3 QuoterV2 (the call used; not a view, but answers an `eth_call`).
    interface IQuoterV2 {
        struct QuoteExactInputSingleParams {
            address tokenIn;
            address tokenOut;
            uint256 amountIn;
            uint24 fee;
            uint160 sqrtPriceLimitX96;
        }
        function quoteExactInputSingle(QuoteExactInputSingleParams params) external returns (uint256 amountOut, uint160 sqrtPriceX96After, uint32 initializedTicksCrossed, uint256 gasEstimate);
    }

    /// Uniswap V3 SwapRouter (the calls used).
    interface ISwapRouter {
        struct ExactInputSingleParams {
            address tokenIn;
            address tokenOut;
            uint24 fee;
            address recipient;
            uint256 deadline;
            uint256 amountIn;
            uint256 amountOutMinimum;
            uint160 sqrtPriceLimitX96;
        }
        function exactInputSingle(ExactInputSingleParams params) external payable returns (uint256 amountOut);
        function unwrapWETH9(uint256 amountMinimum, address recipient) external payable;
        function multicall(bytes[] data) external payable returns (bytes[] results);
    }

    /// ERC-20 allowance and approval.
    interface IERC20Approve {
        function allowance(address owner, address spender) external view returns (uint256);
        function approve(address spender, uint256 amount) external returns (bool);
    }
}

/// Which DEX protocol a chain's `[chains.<id>.dex]` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DexKind {
    UniswapV2,
    UniswapV3,
}

impl DexKind {
    /// The configuration and API name (`uniswap_v2`, `uniswap_v3`), shown as a quote's and
    /// a batch's `market`.
    pub fn as_str(self) -> &'static str {
        match self {
            DexKind::UniswapV2 => "uniswap_v2",
            DexKind::UniswapV3 => "uniswap_v3",
        }
    }
}

/// One side of a swap: the chain's native coin or an ERC-20 token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coin {
    Native,
    Token(Address),
}

/// A chain's DEX, as configured (DECISIONS.md section 14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dex {
    pub kind: DexKind,
    /// V2: Router02. V3: SwapRouter. The spender an ERC-20 input approves.
    pub router: Address,
    /// V3: QuoterV2.
    pub quoter: Option<Address>,
    /// V3: the pool fee tier in hundredths of a basis point (500, 3000, 10000).
    pub fee_tier: u32,
    /// The DEX's wrapped native token.
    pub weth: Address,
}

/// A transaction to send: `to`, native `value`, `data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxCall {
    pub to: Address,
    pub value: U256,
    pub data: Bytes,
}

/// Why a DEX read failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DexError {
    /// The node could not answer, or refused the call (no pool, no liquidity, a reverting
    /// quoter): the DEX cannot quote now.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The DEX answered something that does not decode as the call's result.
    #[error("the DEX answer does not decode: {0}")]
    Malformed(String),
    /// The same coin on both sides.
    #[error("a swap needs two different coins")]
    SameCoin,
}

impl Dex {
    fn address_of(&self, c: Coin) -> Address {
        match c {
            Coin::Native => self.weth,
            Coin::Token(a) => a,
        }
    }

    /// The ERC-20 contract that must approve the router before a swap from `from`; `None`
    /// for the native coin (sent as value).
    pub fn approval_token(&self, from: Coin) -> Option<Address> {
        match from {
            Coin::Native => None,
            Coin::Token(a) => Some(a),
        }
    }

    /// The `eth_call` that quotes `amount_in` of `from` into `to`: (contract, calldata).
    pub fn quote_call(&self, from: Coin, to: Coin, amount_in: U256) -> (Address, Bytes) {
        let (a, b) = (self.address_of(from), self.address_of(to));
        match self.kind {
            DexKind::UniswapV2 => (
                self.router,
                IUniswapV2Router02::getAmountsOutCall {
                    amountIn: amount_in,
                    path: vec![a, b],
                }
                .abi_encode()
                .into(),
            ),
            DexKind::UniswapV3 => (
                self.quoter.unwrap_or(Address::ZERO),
                IQuoterV2::quoteExactInputSingleCall {
                    params: IQuoterV2::QuoteExactInputSingleParams {
                        tokenIn: a,
                        tokenOut: b,
                        amountIn: amount_in,
                        fee: fee24(self.fee_tier),
                        sqrtPriceLimitX96: U160::ZERO,
                    },
                }
                .abi_encode()
                .into(),
            ),
        }
    }

    /// Decodes the answer of [`Dex::quote_call`]: the output amount.
    pub fn decode_quote(&self, ret: &[u8]) -> Result<U256, DexError> {
        match self.kind {
            DexKind::UniswapV2 => {
                let amounts = IUniswapV2Router02::getAmountsOutCall::abi_decode_returns(ret)
                    .map_err(|e| DexError::Malformed(e.to_string()))?;
                amounts
                    .last()
                    .copied()
                    .filter(|_| amounts.len() == 2)
                    .ok_or_else(|| DexError::Malformed("getAmountsOut: not two amounts".into()))
            }
            DexKind::UniswapV3 => {
                let r = IQuoterV2::quoteExactInputSingleCall::abi_decode_returns(ret)
                    .map_err(|e| DexError::Malformed(e.to_string()))?;
                Ok(r.amountOut)
            }
        }
    }

    /// What the DEX returns now for `amount_in` of `from` in `to` (atomic units).
    pub async fn quote(
        &self,
        client: &dyn ChainClient,
        from: Coin,
        to: Coin,
        amount_in: U256,
    ) -> Result<U256, DexError> {
        if from == to {
            return Err(DexError::SameCoin);
        }
        let (contract, data) = self.quote_call(from, to, amount_in);
        let ret = client.call(contract, data).await?;
        self.decode_quote(&ret)
    }

    /// The swap of exactly `amount_in` of `from` into at least `min_out` of `to`, paid to
    /// `recipient`, valid until `deadline` (Unix seconds). The native coin travels as value.
    pub fn swap_call(
        &self,
        from: Coin,
        to: Coin,
        amount_in: U256,
        min_out: U256,
        recipient: Address,
        deadline: u64,
    ) -> TxCall {
        let (a, b) = (self.address_of(from), self.address_of(to));
        let deadline = U256::from(deadline);
        let value = match from {
            Coin::Native => amount_in,
            Coin::Token(_) => U256::ZERO,
        };
        let data: Vec<u8> = match self.kind {
            DexKind::UniswapV2 => {
                // The router's three swaps take the same arguments; a native input travels
                // as value, not as `amountIn`.
                macro_rules! v2_swap {
                    ($call:ident $(, $amount_in:ident: $v:expr)?) => {
                        IUniswapV2Router02::$call {
                            $($amount_in: $v,)?
                            amountOutMin: min_out,
                            path: vec![a, b],
                            to: recipient,
                            deadline,
                        }
                        .abi_encode()
                    };
                }
                match (from, to) {
                    (Coin::Native, _) => v2_swap!(swapExactETHForTokensCall),
                    (_, Coin::Native) => v2_swap!(swapExactTokensForETHCall, amountIn: amount_in),
                    _ => v2_swap!(swapExactTokensForTokensCall, amountIn: amount_in),
                }
            }
            DexKind::UniswapV3 => {
                let native_out = to == Coin::Native;
                let swap = ISwapRouter::exactInputSingleCall {
                    params: ISwapRouter::ExactInputSingleParams {
                        tokenIn: a,
                        tokenOut: b,
                        fee: fee24(self.fee_tier),
                        // A native output is first paid to the router, then unwrapped.
                        recipient: if native_out { self.router } else { recipient },
                        deadline,
                        amountIn: amount_in,
                        amountOutMinimum: min_out,
                        sqrtPriceLimitX96: U160::ZERO,
                    },
                }
                .abi_encode();
                if native_out {
                    let unwrap = ISwapRouter::unwrapWETH9Call {
                        amountMinimum: min_out,
                        recipient,
                    }
                    .abi_encode();
                    ISwapRouter::multicallCall {
                        data: vec![swap.into(), unwrap.into()],
                    }
                    .abi_encode()
                } else {
                    swap
                }
            }
        };
        TxCall {
            to: self.router,
            value,
            data: data.into(),
        }
    }

    /// The approval of the router for `amount` of `token`.
    pub fn approve_call(&self, token: Address, amount: U256) -> TxCall {
        TxCall {
            to: token,
            value: U256::ZERO,
            data: IERC20Approve::approveCall {
                spender: self.router,
                amount,
            }
            .abi_encode()
            .into(),
        }
    }

    /// How much of `token` the router may take from `owner` now.
    pub async fn allowance(
        &self,
        client: &dyn ChainClient,
        token: Address,
        owner: Address,
    ) -> Result<U256, DexError> {
        let data = IERC20Approve::allowanceCall {
            owner,
            spender: self.router,
        }
        .abi_encode();
        let ret = client.call(token, data.into()).await?;
        IERC20Approve::allowanceCall::abi_decode_returns(&ret)
            .map_err(|e| DexError::Malformed(e.to_string()))
    }
}

/// `Transfer(address,address,uint256)`.
const TRANSFER_TOPIC: [u8; 32] =
    alloy::primitives::hex!("ddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");
/// WETH9 `Withdrawal(address,uint256)`.
const WITHDRAWAL_TOPIC: [u8; 32] =
    alloy::primitives::hex!("7fcf532c15f0a6db0bd6d0e038bea71d30d808c7d98cb3bf7268a95bf5081b65");

fn topic_address(t: &alloy::primitives::B256) -> Address {
    Address::from_slice(&t[12..])
}

impl Dex {
    /// What a mined swap paid out, from its receipt's logs: for a token, the sum of its
    /// `Transfer`s to `recipient`; for the native coin, the wrapped token's `Withdrawal`s by
    /// the router (the unwrap that pays the recipient). `None` when no such log is there.
    pub fn executed_out(&self, to: Coin, recipient: Address, logs: &[TxLog]) -> Option<U256> {
        let mut sum: Option<U256> = None;
        for l in logs {
            let hit = match to {
                Coin::Token(token) => {
                    l.address == token
                        && l.topics.len() == 3
                        && l.topics[0].0 == TRANSFER_TOPIC
                        && topic_address(&l.topics[2]) == recipient
                }
                Coin::Native => {
                    l.address == self.weth
                        && l.topics.len() == 2
                        && l.topics[0].0 == WITHDRAWAL_TOPIC
                        && topic_address(&l.topics[1]) == self.router
                }
            };
            if hit && l.data.len() == 32 {
                let v = U256::from_be_slice(&l.data);
                sum = Some(sum.unwrap_or(U256::ZERO).saturating_add(v));
            }
        }
        sum
    }
}

fn fee24(fee: u32) -> alloy::primitives::Uint<24, 1> {
    alloy::primitives::Uint::<24, 1>::from(fee.min(0xff_ffff))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The swap of 5 of `from` for at least 4 of `to`, to 0x09.., until 100.
    fn swap(dex: &Dex, from: Coin, to: Coin) -> TxCall {
        let (recipient, deadline) = (Address::repeat_byte(9), 100);
        dex.swap_call(from, to, U256::from(5), U256::from(4), recipient, deadline)
    }

    fn v2() -> Dex {
        Dex {
            kind: DexKind::UniswapV2,
            router: Address::repeat_byte(1),
            quoter: None,
            fee_tier: 0,
            weth: Address::repeat_byte(2),
        }
    }

    #[test]
    fn selectors_are_the_published_ones() {
        // Router02 getAmountsOut(uint256,address[]) = 0xd06ca61f.
        let (to, d) = v2().quote_call(
            Coin::Native,
            Coin::Token(Address::repeat_byte(3)),
            U256::from(5),
        );
        assert_eq!(to, Address::repeat_byte(1));
        assert_eq!(&d[..4], &[0xd0, 0x6c, 0xa6, 0x1f]);
        // swapExactETHForTokens = 0x7ff36ab5, carries the value.
        let s = swap(&v2(), Coin::Native, Coin::Token(Address::repeat_byte(3)));
        assert_eq!(&s.data[..4], &[0x7f, 0xf3, 0x6a, 0xb5]);
        assert_eq!(s.value, U256::from(5));
        // QuoterV2 quoteExactInputSingle((address,address,uint256,uint24,uint160)) = 0xc6a5026a.
        let v3 = Dex {
            kind: DexKind::UniswapV3,
            quoter: Some(Address::repeat_byte(4)),
            fee_tier: 3000,
            ..v2()
        };
        let (to, d) = v3.quote_call(
            Coin::Native,
            Coin::Token(Address::repeat_byte(3)),
            U256::from(5),
        );
        assert_eq!(to, Address::repeat_byte(4));
        assert_eq!(&d[..4], &[0xc6, 0xa5, 0x02, 0x6a]);
        // SwapRouter exactInputSingle = 0x414bf389; a token input sends no value.
        let s = swap(
            &v3,
            Coin::Token(Address::repeat_byte(3)),
            Coin::Token(Address::repeat_byte(5)),
        );
        assert_eq!(&s.data[..4], &[0x41, 0x4b, 0xf3, 0x89]);
        assert_eq!(s.value, U256::ZERO);
        // approve(address,uint256) = 0x095ea7b3.
        assert_eq!(
            &v2().approve_call(Address::repeat_byte(3), U256::MAX).data[..4],
            &[0x09, 0x5e, 0xa7, 0xb3]
        );
    }

    #[test]
    fn the_output_is_read_from_transfers_to_the_recipient() {
        let token = Address::repeat_byte(3);
        let me = Address::repeat_byte(9);
        let word = |a: Address| {
            let mut w = [0u8; 32];
            w[12..].copy_from_slice(a.as_slice());
            alloy::primitives::B256::from(w)
        };
        let log = |addr, to, v: u64| TxLog {
            address: addr,
            topics: vec![
                TRANSFER_TOPIC.into(),
                word(Address::repeat_byte(7)),
                word(to),
            ],
            data: U256::from(v).to_be_bytes::<32>().to_vec().into(),
        };
        let logs = vec![
            log(token, me, 40),
            log(token, Address::repeat_byte(8), 1000),
            log(Address::repeat_byte(4), me, 1000),
        ];
        assert_eq!(
            v2().executed_out(Coin::Token(token), me, &logs),
            Some(U256::from(40))
        );
        assert_eq!(v2().executed_out(Coin::Native, me, &logs), None);
    }

    #[test]
    fn a_v2_quote_is_the_last_of_two_amounts() {
        let ret = IUniswapV2Router02::getAmountsOutCall::abi_encode_returns(&vec![
            U256::from(10),
            U256::from(7),
        ]);
        assert_eq!(v2().decode_quote(&ret).unwrap(), U256::from(7));
        assert!(v2().decode_quote(&[1, 2, 3]).is_err());
    }
}
