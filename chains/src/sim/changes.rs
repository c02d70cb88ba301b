//! What changes the simulated chain: mining, reorgs, the operation log applied, deferred
//! and flushed, transactions submitted to the pool, and calls and gas estimates.

use super::*;

impl SimChain {
    // ----------------------------------------------------------------------------------
    // Changes

    /// Mines `count` blocks at wall time `now_ms`, `step_ms` apart (0: same timestamp):
    /// the first takes what the mempool can mine, the rest are empty (the mempool's
    /// remaining transactions are not mineable yet: nonce gap or funds). Applied in memory;
    /// returns the operations to write (or to [`SimChain::defer`] when all are empty).
    pub fn mine(&mut self, count: u64, now_ms: u64, step_ms: u64) -> Vec<Op> {
        let mut ops = Vec::new();
        if count == 0 {
            return ops;
        }
        let t0 = self.next_time(now_ms, step_ms);
        let head = self.head;
        let pool = std::mem::take(&mut self.pool);
        self.pool = self.mine_block(t0, pool);
        if self.head > head {
            let b = &self.blocks[&self.head];
            ops.push(Op::Block {
                t_ms: t0,
                txs: b.txs.iter().map(PoolTx::to_block_tx).collect(),
            });
        }
        let empty_from = if ops.is_empty() { 0 } else { 1 };
        let n_empty = count - empty_from;
        if n_empty > 0 {
            let start = t0 + empty_from * step_ms;
            self.push_empty(n_empty, start, step_ms);
            ops.push(Op::Empty {
                count: n_empty,
                t0_ms: start,
                step_ms,
            });
        }
        ops
    }

    /// The operation that mines `t` alone in block `head + 1` at `now_ms`, and the log
    /// index the transfer gets (`None` for the native coin). Nothing changes until the
    /// operation is applied ([`SimChain::apply`]) once it is durable.
    pub fn inject_op(&self, t: Inject, now_ms: u64) -> (Op, u64, Option<u32>) {
        let li = t.token.map(|_| 0);
        let op = Op::Block {
            t_ms: self.next_time(now_ms, 0),
            txs: vec![BlockTx::Injected(t)],
        };
        (op, self.head + 1, li)
    }

    /// The deepest reorg the chain can do: the blocks held above the newest pruned one (the
    /// head when nothing is pruned; block 0 stays).
    pub fn reorg_depth_held(&self) -> u64 {
        self.head - self.floor.number
    }

    /// Checks a reorg of `depth` blocks: at least 1, at most
    /// [`SimChain::reorg_depth_held`].
    pub fn check_reorg(&self, depth: u64) -> Result<(), SimError> {
        let most = self.reorg_depth_held();
        if depth == 0 || depth > most {
            return Err(SimError::Invalid(format!(
                "depth must be from 1 to the chain's height ({most})"
            )));
        }
        Ok(())
    }

    /// Replaces the last `depth` blocks by empty ones (the head's number stays, as with
    /// `anvil_reorg`): their transactions are dropped (`drop`) or return to the front of
    /// the mempool, and their state changes are reverted, newest first ([`Undo`]).
    pub(super) fn reorg(&mut self, depth: u64, drop: bool, t_ms: u64) -> Result<(), SimError> {
        self.check_reorg(depth)?;
        let cut = self.head - depth;
        let removed: Vec<MinedBlock> = self.blocks.split_off(&(cut + 1)).into_values().collect();
        for b in removed.iter().rev() {
            for u in b.undo.iter().rev() {
                self.state.revert(u);
            }
            for t in &b.txs {
                self.located.remove(&t.hash());
            }
        }
        let later: Vec<u64> = self.runs.range(cut + 1..).map(|(f, _)| *f).collect();
        for f in later {
            self.runs.remove(&f);
        }
        if let Some((f, r)) = self.runs.iter_mut().next_back() {
            r.count = r.count.min(cut + 1 - *f);
        }
        self.forks.push(cut + 1);
        let head = self.head;
        self.head = cut;
        self.runs.insert(
            cut + 1,
            Run {
                count: depth,
                t0_ms: t_ms.max(self.time_ms(cut)),
                step_ms: 0,
            },
        );
        self.head = head;
        if !drop {
            let mut back: Vec<PoolTx> = removed.into_iter().flat_map(|b| b.txs).collect();
            back.append(&mut self.pool);
            self.pool = back;
        }
        Ok(())
    }

    /// Applies a durable operation: a replay at start-up, or an operation built by
    /// [`SimChain::inject_op`] or for a reorg once it is written.
    pub fn apply(&mut self, op: &Op) -> Result<(), SimError> {
        match op {
            Op::Empty {
                count,
                t0_ms,
                step_ms,
            } => {
                self.push_empty(*count, *t0_ms, *step_ms);
                Ok(())
            }
            Op::Block { t_ms, txs } => {
                let mut candidates = Vec::with_capacity(txs.len());
                for t in txs {
                    candidates.push(match t {
                        BlockTx::Signed { raw } => PoolTx::Signed(decode_signed(raw)?),
                        BlockTx::Injected(i) => PoolTx::Injected(i.clone()),
                    });
                }
                let hashes: Vec<B256> = candidates.iter().map(PoolTx::hash).collect();
                let n = self.head + 1;
                let left = self.mine_block(*t_ms, candidates);
                if !left.is_empty() || !self.blocks.contains_key(&n) {
                    return Err(SimError::Replay(format!(
                        "block {n}: {} of its transactions do not execute",
                        left.len().max(1)
                    )));
                }
                self.pool.retain(|p| !hashes.contains(&p.hash()));
                Ok(())
            }
            Op::Reorg { depth, drop, t_ms } => self.reorg(*depth, *drop, *t_ms),
        }
    }

    /// Keeps operations of empty blocks (already applied) for the next write instead of
    /// writing them now; consecutive ones coalesce. Non-empty operations must be written
    /// at once and are refused here.
    pub fn defer(&mut self, ops: Vec<Op>) -> Result<(), Vec<Op>> {
        if ops.iter().any(|o| !matches!(o, Op::Empty { .. })) {
            return Err(ops);
        }
        for op in ops {
            let Op::Empty {
                count,
                t0_ms,
                step_ms,
            } = op
            else {
                continue;
            };
            if let Some(Op::Empty {
                count: c,
                t0_ms: t,
                step_ms: s,
            }) = self.unflushed.last_mut()
            {
                if *s == step_ms && *t + *c * *s == t0_ms {
                    *c += count;
                    continue;
                }
            }
            self.unflushed.push(Op::Empty {
                count,
                t0_ms,
                step_ms,
            });
        }
        Ok(())
    }

    /// The deferred operations, to be written before any new one (they are already
    /// applied in memory).
    pub fn take_unflushed(&mut self) -> Vec<Op> {
        std::mem::take(&mut self.unflushed)
    }

    /// Whether deferred operations wait for a write.
    pub fn has_unflushed(&self) -> bool {
        !self.unflushed.is_empty()
    }

    /// Puts back deferred operations whose write failed (in front of newer ones).
    pub fn restore_unflushed(&mut self, mut ops: Vec<Op>) {
        ops.append(&mut self.unflushed);
        self.unflushed = ops;
    }

    /// Accepts a signed raw transaction into the mempool (the node's admission rules:
    /// type, chain id, signature, nonce not used, fee at least the base fee, intrinsic gas,
    /// funds for `gas_limit * max_fee + value`, replacement at +10% fees). A transaction
    /// already pending or mined answers its hash.
    pub fn submit(&mut self, raw: &[u8]) -> Result<B256, SimError> {
        self.admit(decode_signed(raw)?)
    }

    /// [`SimChain::submit`] of a transaction the caller has just signed with the key of
    /// `sender`: the sender is taken as vouched instead of recovered from the signature
    /// (two elliptic-curve multiplications, most of the chain's cost per send).
    /// Every other admission rule applies as in `submit`. What keeps it honest: only the
    /// chain worker's sender vouches, for bytes its signer returned a moment before, with
    /// the signer's own address; bytes read back from the store go through `submit`; debug
    /// builds recover anyway and refuse a mismatch; and a restart replays every mined
    /// transaction with its sender recovered ([`SimChain::apply`]), so a signature that
    /// does not recover to the treasury would stop the chain from loading.
    pub fn submit_vouched(&mut self, raw: &[u8], sender: Address) -> Result<B256, SimError> {
        self.admit(decode_signed_by(raw, Some(sender))?)
    }

    /// The admission rules of [`SimChain::submit`] for a decoded transaction.
    pub(super) fn admit(&mut self, s: SignedTx) -> Result<B256, SimError> {
        if self.knows_tx(s.hash) {
            return Ok(s.hash);
        }
        let tx = &s.tx;
        if tx.chain_id != self.genesis.chain_id {
            return Err(reject("invalid chain id"));
        }
        if tx.to.is_create() {
            return Err(reject(
                "contract creation is not supported by the simulated chain",
            ));
        }
        if tx.nonce < self.state.nonce(s.sender) {
            return Err(reject("nonce too low"));
        }
        if tx.max_priority_fee_per_gas > tx.max_fee_per_gas {
            return Err(reject(
                "max priority fee per gas higher than max fee per gas",
            ));
        }
        if tx.max_fee_per_gas < BASE_FEE {
            return Err(reject("max fee per gas less than block base fee"));
        }
        if tx.gas_limit < intrinsic_gas(&tx.input) {
            return Err(reject("intrinsic gas too low"));
        }
        if tx.gas_limit > BLOCK_GAS_LIMIT {
            return Err(reject("exceeds block gas limit"));
        }
        if max_cost(tx).is_none_or(|c| c > self.state.native(s.sender)) {
            return Err(reject("insufficient funds for gas * price + value"));
        }
        let same = self.pool.iter().position(
            |p| matches!(p, PoolTx::Signed(o) if o.sender == s.sender && o.tx.nonce == tx.nonce),
        );
        if let Some(i) = same {
            let PoolTx::Signed(old) = &self.pool[i] else {
                unreachable!("matched a signed transaction")
            };
            let bumped = |new: u128, old: u128| new.saturating_mul(10) >= old.saturating_mul(11);
            if !bumped(tx.max_fee_per_gas, old.tx.max_fee_per_gas)
                || !bumped(tx.max_priority_fee_per_gas, old.tx.max_priority_fee_per_gas)
            {
                return Err(reject("replacement transaction underpriced"));
            }
            let hash = s.hash;
            self.pool[i] = PoolTx::Signed(s);
            return Ok(hash);
        }
        if self.pool.len() >= MEMPOOL_LIMIT {
            return Err(reject("txpool is full"));
        }
        let hash = s.hash;
        self.pool.push(PoolTx::Signed(s));
        Ok(hash)
    }

    /// Drops a pending transaction from the mempool (as `anvil_dropTransaction`); false
    /// when it is not pending (unknown, or already mined).
    pub fn drop_pending(&mut self, hash: B256) -> bool {
        let before = self.pool.len();
        self.pool.retain(|p| p.hash() != hash);
        self.pool.len() != before
    }

    /// Puts an external transfer into the mempool, to be mined with the next block's other
    /// transactions (a payer's transfer as the node first sees it; the simulation of issue
    /// 40 injects its payers' transfers this way). A hash already pending or mined is
    /// ignored: `false`.
    pub fn inject_pending(&mut self, t: Inject) -> bool {
        if self.knows_tx(t.hash) {
            return false;
        }
        self.pool.push(PoolTx::Injected(t));
        true
    }

    /// Gas the call would use at the head, or why it reverts.
    pub fn estimate_gas(&self, call: &CallRequest) -> Result<u64, SimError> {
        self.evaluate(call.from, call.to, call.value, &call.data)
            .map(|(g, _)| g)
    }

    /// A read-only call at the head: `forwarderAddress(bytes32)` and `treasury()` of the
    /// factory, `balanceOf(address)` of a token; anything else reverts.
    pub fn call(&self, to: Address, data: &[u8]) -> Result<Bytes, SimError> {
        let sel = data.get(..4).ok_or_else(|| revert("no selector"))?;
        match self.state.code.get(&to) {
            Some(Code::Factory { treasury }) => {
                if sel == selector("treasury()") && data.len() == 4 {
                    return Ok(address_word(*treasury));
                }
                if sel == selector("forwarderAddress(bytes32)") && data.len() == 36 {
                    let mut salt = [0u8; 32];
                    salt.copy_from_slice(&data[4..36]);
                    let f = create2(&to.0 .0, &salt, &forwarder_init_code_hash());
                    return Ok(address_word(Address::from(f)));
                }
                Err(revert("factory: unknown function"))
            }
            Some(Code::Token) => {
                if sel == selector("balanceOf(address)") && data.len() == 36 {
                    let owner =
                        word_to_address(&data[4..36]).ok_or_else(|| revert("bad address"))?;
                    let v = self.state.token(to, owner);
                    return Ok(Bytes::copy_from_slice(&v.to_be_bytes::<32>()));
                }
                Err(revert("token: unknown function"))
            }
            _ => Err(revert("no such function")),
        }
    }
}
