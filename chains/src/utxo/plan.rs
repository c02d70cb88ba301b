//! Planning a UTXO spend: how large it is, what it pays in fees, which outputs it spends.
//!
//! Everything is integers: values in atomic units (satoshis, koinu), sizes in weight units
//! (WU; a virtual byte is 4 WU, rounded up), fee rates in atomic units per 1,000 virtual
//! bytes (`sat/kvB`, the unit `estimatesmartfee` answers in; 2 sat/vB is 2,000).
//!
//! Sizes are the largest a signature can make them (a 72-byte DER signature with its
//! sighash byte), so a planned fee never falls short of the rate once signed.
//!
//! The rules (DECISIONS.md section 17, "Network fees" and "Fees on UTXO chains"):
//! * the rate is the node's estimate, the configured floor when it has none, and never
//!   above the ceiling ([`FeePolicy::rate`]);
//! * a sweep pays its fee from its inputs and waits while the fee would exceed 5% of what
//!   it moves, or what is left would be dust ([`plan_sweep`]);
//! * a payout pays the exact amount, its fee from the master's other coins, and its change
//!   back to the master unless the change would be dust ([`plan_payout`]);
//! * a stuck send is replaced with the same inputs and a fee that BIP125 accepts (rules 3
//!   and 4: the new fee pays for the old one and for its own size at the incremental relay
//!   rate), taken from the change ([`plan_replacement`]).
//!
//! Coin selection is the project's own (largest first, a changeless single coin when one
//! fits): the one well-kept library, `bdk_coin_select`, weighs fee rates as `f32` and says
//! of itself that it expects "potentially catastrophic" bugs; money is never a float here.

use super::rpc::OutPoint;

/// Weight units of the fields every transaction has: version (4), locktime (4) and the
/// input and output counts (1 byte each below 253), times 4.
const TX_FIXED_WEIGHT: u64 = 10 * 4;
/// The segwit marker and flag bytes (witness data: 1 WU each).
const SEGWIT_HEADER_WEIGHT: u64 = 2;
/// Each count varint grows by 2 bytes from 253 items on.
const VARINT_STEP: usize = 253;
/// Most inputs one planned transaction spends: 500 P2PKH inputs are about 74,000 vbytes,
/// under the 100,000-vbyte standardness limit of Bitcoin Core and its forks.
pub const MAX_INPUTS: usize = 500;

/// How an output is locked: what paying it and spending it weigh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScriptKind {
    /// Pay to witness public key hash (`0014{20}`), BIP84 deposit and master addresses.
    P2wpkh,
    /// Pay to public key hash (`76a914{20}88ac`), dogecoin's addresses.
    P2pkh,
    /// Pay to script hash (`a914{20}87`): payable, never ours to spend.
    P2sh,
    /// Pay to witness script hash (`0020{32}`): payable, never ours to spend.
    P2wsh,
    /// Pay to taproot (`5120{32}`): payable, never ours to spend.
    P2tr,
}

impl ScriptKind {
    /// The kind of a locking script; `None` for a script a payout may not pay (anything
    /// but the five standard forms).
    pub fn of(script: &[u8]) -> Option<ScriptKind> {
        match script {
            [0x00, 0x14, rest @ ..] if rest.len() == 20 => Some(ScriptKind::P2wpkh),
            [0x76, 0xa9, 0x14, mid @ .., 0x88, 0xac] if mid.len() == 20 => Some(ScriptKind::P2pkh),
            [0xa9, 0x14, mid @ .., 0x87] if mid.len() == 20 => Some(ScriptKind::P2sh),
            [0x00, 0x20, rest @ ..] if rest.len() == 32 => Some(ScriptKind::P2wsh),
            [0x51, 0x20, rest @ ..] if rest.len() == 32 => Some(ScriptKind::P2tr),
            _ => None,
        }
    }

    /// Length of the locking script, bytes.
    fn script_len(self) -> u64 {
        match self {
            ScriptKind::P2wpkh => 22,
            ScriptKind::P2pkh => 25,
            ScriptKind::P2sh => 23,
            ScriptKind::P2wsh | ScriptKind::P2tr => 34,
        }
    }

    /// Weight of an output paying this kind: value (8), script length (1), script.
    pub fn output_weight(self) -> u64 {
        (8 + 1 + self.script_len()) * 4
    }

    /// Weight of an input spending an output of this kind with one signature, at most;
    /// `None` for the kinds the appliance never holds.
    /// P2WPKH: outpoint 36 + empty script_sig 1 + sequence 4 (x4), and a witness of the
    /// item count, a 72-byte signature and a 33-byte key with their lengths (108 WU).
    /// P2PKH: outpoint 36 + script_sig (1 + 1 + 72 + 1 + 33) + sequence 4, all x4.
    pub fn input_weight(self) -> Option<u64> {
        match self {
            ScriptKind::P2wpkh => Some((36 + 1 + 4) * 4 + (1 + 1 + 72 + 1 + 33)),
            ScriptKind::P2pkh => Some((36 + 1 + (1 + 72 + 1 + 33) + 4) * 4),
            _ => None,
        }
    }

    fn is_segwit(self) -> bool {
        matches!(self, ScriptKind::P2wpkh)
    }
}

/// What counts as dust: an output too small to relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dust {
    /// Bitcoin Core's rule: an output is dust when spending it would cost more than it
    /// holds at this rate (sat/kvB; Core's `-dustrelayfee` default is 3,000): 294 sat for
    /// P2WPKH, 546 sat for P2PKH.
    Relay { rate_kvb: u64 },
    /// A fixed threshold in atomic units (dogecoin's 0.01 DOGE = 1,000,000 koinu).
    Fixed(u64),
}

impl Dust {
    /// Smallest value an output of `kind` may carry.
    pub fn limit(self, kind: ScriptKind) -> u64 {
        match self {
            Dust::Fixed(v) => v,
            Dust::Relay { rate_kvb } => {
                // Core's GetDustThreshold: output size plus the size of spending it
                // (148 bytes, or 67 virtual bytes for a witness program).
                let spend = if matches!(
                    kind,
                    ScriptKind::P2wpkh | ScriptKind::P2wsh | ScriptKind::P2tr
                ) {
                    67
                } else {
                    148
                };
                (kind.output_weight() / 4 + spend) * rate_kvb / 1000
            }
        }
    }
}

/// A network's fee rules (DECISIONS.md section 17).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeePolicy {
    /// The rate used when the node has no estimate, and the lowest used at all, sat/kvB.
    pub floor_kvb: u64,
    /// The highest rate ever used, sat/kvB.
    pub ceiling_kvb: u64,
    /// The node's incremental relay rate (BIP125 rule 4), sat/kvB: 1,000 on bitcoin.
    pub incremental_kvb: u64,
    pub dust: Dust,
}

impl FeePolicy {
    /// The rate to pay: the node's `estimate` (sat/kvB) held between the floor and the
    /// ceiling; the floor when the node has no estimate (regtest, a young node).
    pub fn rate(&self, estimate: Option<u64>) -> u64 {
        estimate
            .unwrap_or(self.floor_kvb)
            .max(self.floor_kvb)
            .min(self.ceiling_kvb.max(self.floor_kvb))
    }
}

/// The fee of `weight` WU at `rate_kvb`, rounded up to a whole atomic unit.
pub fn fee_for(weight: u64, rate_kvb: u64) -> u64 {
    (vsize(weight) * rate_kvb).div_ceil(1000)
}

/// Virtual size of `weight` WU, rounded up.
pub fn vsize(weight: u64) -> u64 {
    weight.div_ceil(4)
}

/// A custodied output that may be spent: the outpoint, its value and its lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coin {
    pub outpoint: OutPoint,
    /// Atomic units.
    pub value: u64,
    /// A kind with an [`ScriptKind::input_weight`] (P2WPKH or P2PKH).
    pub kind: ScriptKind,
}

/// One output of a planned transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Payment {
    pub kind: ScriptKind,
    /// Atomic units.
    pub value: u64,
}

/// A transaction to sign: the coins it spends, what it pays (in this order), the change
/// (last output, to the master) and the fee.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub inputs: Vec<Coin>,
    pub payments: Vec<Payment>,
    /// The change back to the master, atomic units; `None` when it would be dust.
    pub change: Option<u64>,
    /// Atomic units: inputs minus outputs.
    pub fee: u64,
    /// Largest weight once signed, WU.
    pub weight: u64,
}

impl Plan {
    /// The fee rate the plan pays at its largest size, sat/kvB (rounded down).
    pub fn rate_kvb(&self) -> u64 {
        self.fee * 1000 / vsize(self.weight)
    }
}

/// Weight of a transaction spending `inputs` and paying `outputs`.
fn tx_weight<'a>(
    inputs: impl IntoIterator<Item = &'a Coin>,
    outputs: impl IntoIterator<Item = ScriptKind>,
) -> u64 {
    let (mut w, mut n_in, mut segwit) = (TX_FIXED_WEIGHT, 0usize, false);
    for c in inputs {
        // Plans hold only coins the appliance can spend; any other weighs "too much", and
        // the sums saturate so it can never wrap into a small fee.
        w = w.saturating_add(c.kind.input_weight().unwrap_or(u64::MAX / 4));
        n_in += 1;
        segwit |= c.kind.is_segwit();
    }
    let mut n_out = 0usize;
    for k in outputs {
        w = w.saturating_add(k.output_weight());
        n_out += 1;
    }
    let grow = |n: usize| if n >= VARINT_STEP { 2 * 4 } else { 0 };
    let segwit = if segwit { SEGWIT_HEADER_WEIGHT } else { 0 };
    w.saturating_add(grow(n_in) + grow(n_out) + segwit)
}

/// Why a sweep is not sent now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SweepWait {
    /// No confirmed coin to sweep.
    Nothing,
    /// What would reach the master is dust (or nothing) after the fee.
    Dust { total: u64, fee: u64 },
    /// The fee would exceed 5% of the value moved: wait for more deposits.
    FeeOverFivePercent { total: u64, fee: u64 },
}

/// A sweep of `coins` (one deposit address's confirmed outputs) into one output of kind
/// `master` at `rate_kvb`, the fee from the inputs: the largest coins first, at most
/// [`MAX_INPUTS`] (the rest go in the next sweep). Waits per [`SweepWait`].
pub fn plan_sweep(
    coins: &[Coin],
    master: ScriptKind,
    rate_kvb: u64,
    dust: Dust,
) -> Result<Plan, SweepWait> {
    let mut inputs: Vec<Coin> = coins
        .iter()
        .filter(|c| c.kind.input_weight().is_some())
        .cloned()
        .collect();
    if inputs.is_empty() {
        return Err(SweepWait::Nothing);
    }
    sort_largest_first(&mut inputs);
    inputs.truncate(MAX_INPUTS);
    let total: u64 = inputs.iter().map(|c| c.value).sum();
    let weight = tx_weight(&inputs, [master]);
    let fee = fee_for(weight, rate_kvb);
    // 5% of the value moved: fee / total > 1 / 20.
    if u128::from(fee) * 20 > u128::from(total) {
        return Err(SweepWait::FeeOverFivePercent { total, fee });
    }
    let out = total - fee;
    if out < dust.limit(master) {
        return Err(SweepWait::Dust { total, fee });
    }
    Ok(Plan {
        inputs,
        payments: vec![Payment {
            kind: master,
            value: out,
        }],
        change: None,
        fee,
        weight,
    })
}

/// Why a payout cannot be planned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// The coins do not cover the payments and the fee (`needed` is the least that would,
    /// with the inputs chosen so far).
    Short { available: u64, needed: u64 },
    /// A payment is below the dust limit of its output kind.
    DustPayment { value: u64, limit: u64 },
    /// More than [`MAX_INPUTS`] coins would be needed.
    TooManyInputs,
    /// The replacement's change cannot pay the higher fee and no other coin can.
    CannotBump,
}

/// A payout of `payments` from `coins` (the master's confirmed outputs) at `rate_kvb`,
/// change of kind `change_kind` back to the master. The payments are exact; the fee and
/// the change come from the inputs. Choice: a single coin that pays everything with no
/// change and wastes less than a change output would cost; else the largest coins first
/// until they cover the payments and the fee, with change unless it would be dust.
pub fn plan_payout(
    coins: &[Coin],
    payments: &[Payment],
    change_kind: ScriptKind,
    rate_kvb: u64,
    dust: Dust,
) -> Result<Plan, PlanError> {
    for p in payments {
        let limit = dust.limit(p.kind);
        if p.value < limit {
            return Err(PlanError::DustPayment {
                value: p.value,
                limit,
            });
        }
    }
    let paid: u64 = payments.iter().map(|p| p.value).sum();
    let kinds: Vec<ScriptKind> = payments.iter().map(|p| p.kind).collect();
    let mut candidates: Vec<Coin> = coins
        .iter()
        .filter(|c| c.kind.input_weight().is_some())
        .cloned()
        .collect();
    sort_largest_first(&mut candidates);
    let available: u64 = candidates.iter().map(|c| c.value).sum();
    let change_cost = fee_for(change_kind.output_weight(), rate_kvb) + dust.limit(change_kind);
    // A changeless single coin: the smallest that covers payments and fee and leaves less
    // than a change output would cost.
    for c in candidates.iter().rev() {
        let fee = fee_for(tx_weight([c], kinds.iter().copied()), rate_kvb);
        let need = paid + fee;
        if c.value >= need && c.value - need < change_cost {
            return Ok(Plan {
                inputs: vec![c.clone()],
                payments: payments.to_vec(),
                change: None,
                fee: c.value - paid,
                weight: tx_weight([c], kinds.iter().copied()),
            });
        }
    }
    let mut inputs = Vec::new();
    let mut total = 0u64;
    let mut needed = paid;
    for c in candidates {
        if inputs.len() == MAX_INPUTS {
            return Err(PlanError::TooManyInputs);
        }
        total += c.value;
        inputs.push(c);
        if let Some(plan) = settle(&inputs, total, payments, change_kind, rate_kvb, dust) {
            return Ok(plan);
        }
        needed = paid + fee_for(tx_weight(&inputs, kinds.iter().copied()), rate_kvb);
    }
    Err(PlanError::Short { available, needed })
}

/// The plan spending exactly `inputs` (worth `total`) for `payments` at `rate_kvb`: with
/// change when the change is not dust, else without (the excess to the fee); `None` when
/// they do not cover the payments and the fee.
fn settle(
    inputs: &[Coin],
    total: u64,
    payments: &[Payment],
    change_kind: ScriptKind,
    rate_kvb: u64,
    dust: Dust,
) -> Option<Plan> {
    let paid: u64 = payments.iter().map(|p| p.value).sum();
    let kinds = payments.iter().map(|p| p.kind);
    let with_change = tx_weight(inputs, kinds.clone().chain([change_kind]));
    let fee = fee_for(with_change, rate_kvb);
    if let Some(change) = total.checked_sub(paid + fee) {
        if change >= dust.limit(change_kind) {
            return Some(Plan {
                inputs: inputs.to_vec(),
                payments: payments.to_vec(),
                change: Some(change),
                fee,
                weight: with_change,
            });
        }
    }
    let without = tx_weight(inputs, kinds);
    let fee = fee_for(without, rate_kvb);
    (total >= paid + fee).then(|| Plan {
        inputs: inputs.to_vec(),
        payments: payments.to_vec(),
        change: None,
        fee: total - paid,
        weight: without,
    })
}

/// What a replacement must outbid: the plan that was signed and its size once signed.
#[derive(Clone, Copy, Debug)]
pub struct Replaced<'a> {
    pub plan: &'a Plan,
    /// Virtual bytes of the signed transaction (signatures can be shorter than planned,
    /// which makes its real rate higher than [`Plan::rate_kvb`]).
    pub signed_vsize: u64,
}

/// A replacement of `prev` (opt-in RBF, BIP125) at `rate_kvb` or more: the same inputs
/// and payments; a fee of at least the old fee plus the replacement's own size at the
/// incremental relay rate (rules 3 and 4) and a rate above the old one's (rule 6), taken
/// from the change. When the change cannot pay it (or would become dust), coins from
/// `more` (confirmed, not spent by `prev`) are added, largest first. The payments never
/// change.
pub fn plan_replacement(
    prev: Replaced<'_>,
    more: &[Coin],
    change_kind: ScriptKind,
    rate_kvb: u64,
    policy: &FeePolicy,
) -> Result<Plan, PlanError> {
    let old_rate = (prev.plan.fee * 1000).div_ceil(prev.signed_vsize.max(1));
    // Rule 6 (a strictly higher rate) and the asked rate, whichever is more.
    let rate_kvb = rate_kvb.max(old_rate + 1);
    let prev = prev.plan;
    let mut inputs = prev.inputs.clone();
    let mut extra: Vec<Coin> = more
        .iter()
        .filter(|c| {
            c.kind.input_weight().is_some() && !inputs.iter().any(|i| i.outpoint == c.outpoint)
        })
        .cloned()
        .collect();
    sort_largest_first(&mut extra);
    let mut extra = extra.into_iter();
    loop {
        let total: u64 = inputs.iter().map(|c| c.value).sum();
        if let Some(plan) = bumped(prev, &inputs, total, change_kind, rate_kvb, policy) {
            return Ok(plan);
        }
        match extra.next() {
            Some(c) if inputs.len() < MAX_INPUTS => inputs.push(c),
            _ => return Err(PlanError::CannotBump),
        }
    }
}

/// [`plan_replacement`] over exactly `inputs`: the least fee that meets both the rate and
/// BIP125 rule 4, with change if it is not dust.
fn bumped(
    prev: &Plan,
    inputs: &[Coin],
    total: u64,
    change_kind: ScriptKind,
    rate_kvb: u64,
    policy: &FeePolicy,
) -> Option<Plan> {
    let dust = policy.dust;
    let paid: u64 = prev.payments.iter().map(|p| p.value).sum();
    let kinds = prev.payments.iter().map(|p| p.kind);
    let least = |weight: u64| {
        fee_for(weight, rate_kvb).max(prev.fee + fee_for(weight, policy.incremental_kvb))
    };
    let with_change = tx_weight(inputs, kinds.clone().chain([change_kind]));
    let fee = least(with_change);
    if let Some(change) = total.checked_sub(paid + fee) {
        if change >= dust.limit(change_kind) {
            return Some(Plan {
                inputs: inputs.to_vec(),
                payments: prev.payments.clone(),
                change: Some(change),
                fee,
                weight: with_change,
            });
        }
    }
    let without = tx_weight(inputs, kinds);
    let fee = least(without);
    (total >= paid + fee).then(|| Plan {
        inputs: inputs.to_vec(),
        payments: prev.payments.clone(),
        change: None,
        fee: total - paid,
        weight: without,
    })
}

/// Largest value first; ties by outpoint, so a plan is the same on every run.
fn sort_largest_first(coins: &mut [Coin]) {
    coins.sort_by(|a, b| {
        b.value
            .cmp(&a.value)
            .then_with(|| a.outpoint.txid.cmp(&b.outpoint.txid))
            .then_with(|| a.outpoint.vout.cmp(&b.outpoint.vout))
    });
}

#[cfg(test)]
mod tests;
