//! How the simulated chain executes: a transaction evaluated against the state (native and
//! token transfers, forwarder sweeps, calls that revert), its effects applied, blocks mined
//! from the pool, and old blocks pruned.

use super::*;

impl SimChain {
    // ----------------------------------------------------------------------------------
    // Execution

    /// Gas and effects of a call at the head, or why it reverts. Reads only.
    pub(super) fn evaluate(
        &self,
        from: Address,
        to: Address,
        value: U256,
        data: &[u8],
    ) -> Result<(u64, Vec<Effect>), SimError> {
        let base = intrinsic_gas(data);
        if self.state.native(from) < value {
            return Err(revert("insufficient balance for transfer"));
        }
        let native = |v: U256| (!v.is_zero()).then_some(Effect::Native { from, to, value: v });
        if !value.is_zero() && rejects_transfers(&to) {
            return Err(revert("recipient rejects transfers"));
        }
        match self.state.code.get(&to).copied() {
            None => Ok((base, native(value).into_iter().collect())),
            Some(Code::Forwarder) => {
                if !data.is_empty() {
                    return Err(revert("forwarder: unknown function"));
                }
                Ok((base + 100, native(value).into_iter().collect()))
            }
            Some(Code::Token) => {
                if !value.is_zero() {
                    return Err(revert("token: not payable"));
                }
                if data.len() != 68 || data[..4] != SEL_TRANSFER {
                    return Err(revert("token: unknown function"));
                }
                let dest = word_to_address(&data[4..36]).ok_or_else(|| revert("bad address"))?;
                let amount = U256::from_be_slice(&data[36..68]);
                if rejects_transfers(&dest) {
                    return Err(revert("token: recipient rejects transfers"));
                }
                let have = self.state.token(to, from);
                if have < amount {
                    return Err(revert("ERC20: transfer amount exceeds balance"));
                }
                if dest != from && self.state.token(to, dest).checked_add(amount).is_none() {
                    return Err(revert("ERC20: balance overflow"));
                }
                Ok((
                    base + 30_000,
                    vec![Effect::Token {
                        token: to,
                        from,
                        to: dest,
                        value: amount,
                    }],
                ))
            }
            Some(Code::Factory { treasury }) => {
                if !value.is_zero() {
                    return Err(revert("factory: not payable"));
                }
                self.evaluate_sweep(to, treasury, data, base)
            }
            Some(Code::Proxy) => {
                if !value.is_zero() {
                    return Err(revert("proxy: value not supported"));
                }
                let (salt, init) = (data.get(..32), data.get(32..));
                let (Some(salt), Some(init)) = (salt, init) else {
                    return Err(revert("proxy: no salt"));
                };
                // Only the pinned factory runs here: its creation code for some treasury.
                let treasury = (init.len() >= 32)
                    .then(|| word_to_address(&init[init.len() - 32..]))
                    .flatten()
                    .filter(|t| init == factory_init_code(&t.0 .0).as_slice())
                    .ok_or_else(|| revert("proxy: unknown creation code"))?;
                if salt != FACTORY_SALT {
                    return Err(revert("proxy: unexpected salt for the factory"));
                }
                if treasury.is_zero() {
                    return Err(revert("zero treasury"));
                }
                let mut s = [0u8; 32];
                s.copy_from_slice(salt);
                let at = Address::from(create2(&DEPLOYMENT_PROXY, &s, &keccak256(init).0));
                if self.has_code(at) {
                    return Err(revert("proxy: create2 collision"));
                }
                Ok((
                    base + 32_000 + 200 * init.len() as u64 / 2,
                    vec![Effect::Deploy {
                        at,
                        code: Code::Factory { treasury },
                    }],
                ))
            }
        }
    }

    /// `sweep(bytes32 salt, address[] tokens)` of the factory at `factory`.
    pub(super) fn evaluate_sweep(
        &self,
        factory: Address,
        treasury: Address,
        data: &[u8],
        base: u64,
    ) -> Result<(u64, Vec<Effect>), SimError> {
        let sel = selector("sweep(bytes32,address[])");
        if data.len() < 100 || data[..4] != sel {
            return Err(revert("factory: unknown function"));
        }
        let mut salt = [0u8; 32];
        salt.copy_from_slice(&data[4..36]);
        if U256::from_be_slice(&data[36..68]) != U256::from(0x40) {
            return Err(revert("factory: bad calldata"));
        }
        let len = U256::from_be_slice(&data[68..100]);
        let len = usize::try_from(len)
            .ok()
            .filter(|l| *l <= 64 && data.len() == 100 + 32 * l)
            .ok_or_else(|| revert("factory: bad calldata"))?;
        let fwd = Address::from(create2(&factory.0 .0, &salt, &forwarder_init_code_hash()));
        let mut gas = base + 5_000;
        let mut effects = Vec::new();
        if !self.has_code(fwd) {
            gas += 45_000;
            effects.push(Effect::Deploy {
                at: fwd,
                code: Code::Forwarder,
            });
        }
        let mut seen = Vec::new();
        for i in 0..len {
            let w = &data[100 + 32 * i..132 + 32 * i];
            let t = word_to_address(w).ok_or_else(|| revert("bad address"))?;
            gas += 10_000;
            if seen.contains(&t) {
                continue; // a second flush finds nothing left
            }
            seen.push(t);
            // The zero address stands for the native coin.
            let native = t.is_zero();
            if !native && self.state.code.get(&t) != Some(&Code::Token) {
                return Err(revert("forwarder: token call failed"));
            }
            let (value, cost) = if native {
                (self.state.native(fwd), 9_000)
            } else {
                (self.state.token(t, fwd), 30_000)
            };
            if !value.is_zero() {
                gas += cost;
                let (from, to) = (fwd, treasury);
                effects.push(match native {
                    true => Effect::Native { from, to, value },
                    false => Effect::Token {
                        token: t,
                        from,
                        to,
                        value,
                    },
                });
            }
        }
        Ok((gas, effects))
    }

    /// Applies effects in order; the token transfers become logs numbered from `log_index`.
    pub(super) fn apply_effects(&mut self, effects: Vec<Effect>, log_index: &mut u32) -> Vec<Log> {
        let mut logs = Vec::new();
        for e in effects {
            match e {
                Effect::Native { from, to, value } => {
                    let f = self.state.native(from).saturating_sub(value);
                    self.state.set_native(from, f);
                    let t = self.state.native(to).saturating_add(value);
                    self.state.set_native(to, t);
                }
                Effect::Token {
                    token,
                    from,
                    to,
                    value,
                } => {
                    let f = self.state.token(token, from).saturating_sub(value);
                    self.state.set_token(token, from, f);
                    let t = self.state.token(token, to).saturating_add(value);
                    self.state.set_token(token, to, t);
                    logs.push(Log {
                        token,
                        from,
                        to,
                        value,
                        index: *log_index,
                    });
                    *log_index += 1;
                }
                Effect::Deploy { at, code } => {
                    self.state.set_code(at, code);
                }
            }
        }
        logs
    }

    /// Whether `s` can be mined now: next nonce of its sender, fee at least the base fee,
    /// and the sender can pay `gas_limit * max_fee + value`.
    pub(super) fn includable(&self, s: &SignedTx) -> bool {
        s.tx.nonce == self.state.nonce(s.sender)
            && s.tx.max_fee_per_gas >= BASE_FEE
            && max_cost(&s.tx).is_some_and(|c| c <= self.state.native(s.sender))
    }

    /// Executes an includable signed transaction (nonce used, gas charged, effects applied
    /// unless it reverts or runs out of gas).
    pub(super) fn execute_signed(&mut self, s: &SignedTx, log_index: &mut u32) -> TxResult {
        let tx = &s.tx;
        let to = match tx.to {
            TxKind::Call(a) => a,
            TxKind::Create => Address::ZERO, // refused at broadcast; never mined
        };
        let price = effective_price(tx);
        self.state.set_nonce(s.sender, tx.nonce + 1);
        let outcome = if tx.to.is_create() {
            Err(revert("contract creation is not simulated"))
        } else {
            self.evaluate(s.sender, to, tx.value, &tx.input)
        };
        let (success, gas_used, effects) = match outcome {
            Ok((gas, eff)) if gas <= tx.gas_limit => (true, gas, eff),
            Ok(_) => (false, tx.gas_limit, Vec::new()), // out of gas
            Err(_) => (
                false,
                intrinsic_gas(&tx.input).min(tx.gas_limit),
                Vec::new(),
            ),
        };
        let fee = U256::from(gas_used) * U256::from(price);
        let bal = self.state.native(s.sender).saturating_sub(fee);
        self.state.set_native(s.sender, bal);
        let native = (success && !tx.value.is_zero()).then_some((s.sender, to, tx.value));
        let logs = if success {
            self.apply_effects(effects, log_index)
        } else {
            Vec::new()
        };
        TxResult {
            hash: s.hash,
            success,
            gas_used,
            native,
            logs,
        }
    }

    pub(super) fn execute_injected(&mut self, i: &Inject, log_index: &mut u32) -> TxResult {
        let fits = match i.token {
            None => self.state.native(i.to).checked_add(i.value).is_some(),
            Some(t) => {
                self.state.code.get(&t) == Some(&Code::Token)
                    && self.state.token(t, i.to).checked_add(i.value).is_some()
            }
        };
        let mut r = TxResult {
            hash: i.hash,
            success: fits,
            gas_used: if i.token.is_some() { 51_000 } else { 21_000 },
            native: None,
            logs: Vec::new(),
        };
        if !fits {
            return r;
        }
        match i.token {
            None => {
                let v = self.state.native(i.to) + i.value;
                self.state.set_native(i.to, v);
                r.native = (!i.value.is_zero()).then_some((i.from, i.to, i.value));
            }
            Some(t) => {
                let v = self.state.token(t, i.to) + i.value;
                self.state.set_token(t, i.to, v);
                r.logs.push(Log {
                    token: t,
                    from: i.from,
                    to: i.to,
                    value: i.value,
                    index: *log_index,
                });
                *log_index += 1;
            }
        }
        r
    }

    /// Mines block `head + 1` from `candidates` in order: injected transfers always, signed
    /// transactions when includable (repeated passes, so a later nonce of the same sender
    /// follows an earlier one). Returns the transactions not included; when none is
    /// included, nothing changes (no block).
    pub(super) fn mine_block(&mut self, t_ms: u64, candidates: Vec<PoolTx>) -> Vec<PoolTx> {
        let n = self.head + 1;
        let mut left = candidates;
        let mut txs = Vec::new();
        let mut results = Vec::new();
        let mut log_index = 0u32;
        loop {
            let mut progress = false;
            let mut rest = Vec::new();
            for p in left {
                let r = match &p {
                    PoolTx::Injected(i) => Some(self.execute_injected(i, &mut log_index)),
                    PoolTx::Signed(s) if self.includable(s) => {
                        Some(self.execute_signed(s, &mut log_index))
                    }
                    PoolTx::Signed(_) => None,
                };
                match r {
                    Some(r) => {
                        progress = true;
                        txs.push(p);
                        results.push(r);
                    }
                    None => rest.push(p),
                }
            }
            left = rest;
            if !progress || left.is_empty() {
                break;
            }
        }
        if txs.is_empty() {
            return left;
        }
        let mut root = Vec::with_capacity(32 * txs.len());
        for t in &txs {
            root.extend_from_slice(t.hash().as_slice());
        }
        for (i, t) in txs.iter().enumerate() {
            self.located.insert(t.hash(), (n, i));
        }
        let tx_root = keccak256(&root);
        let hash = self.compute_hash(n, Some(&tx_root));
        let undo = std::mem::take(&mut self.state.undo);
        self.blocks.insert(
            n,
            MinedBlock {
                t_ms,
                txs,
                results,
                hash,
                undo,
            },
        );
        self.head = n;
        self.prune();
        left
    }

    /// Drops from memory the blocks more than [`SimChain::retain_blocks`] below the head
    /// and below the reader's hold ([`SimChain::hold_from`]), and any more than
    /// [`HOLD_LIMIT`] below it: their transactions, receipts, state changes and runs of
    /// empty blocks (the newest dropped block's hash and timestamp stay, [`Floor`]).
    /// Deterministic in the head, the retention and the hold; a replay loads with the hold
    /// `Some(0)` (only [`HOLD_LIMIT`] applies), so it holds at least what the run that wrote
    /// the log held, and every reorg that run accepted replays. A reorg deeper than what is
    /// held is refused ([`SimChain::check_reorg`]).
    pub(super) fn prune(&mut self) {
        let by_age = self.head.saturating_sub(self.retain);
        let floor = match self.hold {
            None => by_age,
            Some(from) => by_age.min(from.saturating_sub(1)),
        }
        .max(self.head.saturating_sub(HOLD_LIMIT));
        if floor == 0 || floor <= self.floor.number {
            return;
        }
        let keep = Floor {
            number: floor,
            hash: self.hash(floor),
            t_ms: self.time_ms(floor),
        };
        while let Some(e) = self.blocks.first_entry() {
            if *e.key() > floor {
                break;
            }
            for t in &e.remove().txs {
                self.located.remove(&t.hash());
            }
        }
        while let Some(e) = self.runs.first_entry() {
            if e.key() + e.get().count > floor {
                break;
            }
            e.remove();
        }
        self.floor = keep;
    }

    /// Appends `count` empty blocks, extending the last run when the timestamps continue it.
    pub(super) fn push_empty(&mut self, count: u64, t0_ms: u64, step_ms: u64) {
        if count == 0 {
            return;
        }
        let first = self.head + 1;
        if let Some((f, r)) = self.runs.iter_mut().next_back() {
            if *f + r.count == first
                && r.step_ms == step_ms
                && r.t0_ms + r.count * r.step_ms == t0_ms
            {
                r.count += count;
                self.head += count;
                self.prune();
                return;
            }
        }
        self.runs.insert(
            first,
            Run {
                count,
                t0_ms,
                step_ms,
            },
        );
        self.head += count;
        self.prune();
    }

    /// The timestamp of the next block at wall time `now_ms`: never before the head's, and
    /// on the run's grid when a timer block continues a run of empty blocks (so a replay of
    /// the coalesced run gives the same timestamps).
    pub(super) fn next_time(&self, now_ms: u64, step_ms: u64) -> u64 {
        let last = self.time_ms(self.head);
        if step_ms > 0 {
            if let Some((f, r)) = self.runs.iter().next_back() {
                let expected = r.t0_ms + r.count * r.step_ms;
                if f + r.count == self.head + 1
                    && r.step_ms == step_ms
                    && now_ms.abs_diff(expected) < step_ms.max(1_000)
                {
                    return expected.max(last);
                }
            }
        }
        now_ms.max(last)
    }
}
