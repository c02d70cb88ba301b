//! Writes of keyed state on [`WriteCtx`]: idempotency records, the ledger's holdings per
//! deposit address (rows of `accounts`, [`ledger::holding_key`]), test mode's simulated
//! balances, the address quota and `meta`. (The reads are in [`crate::ReadOps`];
//! chain-adapter state is in [`crate::chain_state`].)

use redb::ReadableTable;
use uuid::Uuid;

use crate::codec::{decode, encode_record};
use crate::ctx::{sim_key, ReadOps, WriteCtx};
use crate::ledger::Holding;
use crate::records::{Event, IdempotencyRecord};
use crate::schema::*;
use crate::StoreError;

impl WriteCtx<'_> {
    /// Stores the first answer to an idempotent request.
    pub fn idempotency_put(
        &mut self,
        key: &[u8],
        rec: &IdempotencyRecord,
    ) -> Result<(), StoreError> {
        let r = (|| {
            let mut t = self.table(IDEMPOTENCY)?;
            t.insert(key, encode_record(rec).as_slice())?;
            drop(t);
            let mut exp = self.table(IDEMPOTENCY_EXP)?;
            let mut ek = rec.created_at.to_be_bytes().to_vec();
            ek.extend_from_slice(key);
            exp.insert(ek.as_slice(), ())?;
            Ok(())
        })();
        self.track(r)
    }

    /// Deletes idempotency records created before `cutoff_us`, at most `max` of them.
    /// Returns how many were removed.
    pub fn idempotency_purge(&mut self, cutoff_us: i64, max: usize) -> Result<usize, StoreError> {
        let r = (|| {
            let mut exp = self.table(IDEMPOTENCY_EXP)?;
            let hi = cutoff_us.max(0).to_be_bytes();
            let mut victims = Vec::new();
            for e in exp.range::<&[u8]>(..hi.as_slice())? {
                let (k, _) = e?;
                victims.push(k.value().to_vec());
                if victims.len() >= max {
                    break;
                }
            }
            let mut t = self.table(IDEMPOTENCY)?;
            for v in &victims {
                exp.remove(v.as_slice())?;
                t.remove(&v[8..])?;
            }
            Ok(victims.len())
        })();
        self.track(r)
    }

    /// Rewrites stored idempotency records in place, for a start-up migration that needs
    /// what the store does not hold (the data key): `f` sees each record (with its key)
    /// after `after` and returns the record to store instead, or `None` to keep it. At most
    /// `max` records are seen. Answers how many were rewritten and the key of the last
    /// record seen (`None` when the table was read to its end). A row that does not decode
    /// is left as it is.
    pub fn rewrite_idempotency(
        &mut self,
        after: Option<&[u8]>,
        max: usize,
        mut f: impl FnMut(&[u8], &IdempotencyRecord) -> Option<IdempotencyRecord>,
    ) -> Result<(usize, Option<Vec<u8>>), StoreError> {
        let r = (|| {
            let (mut changed, mut last, mut seen) = (Vec::new(), None, 0usize);
            {
                let t = self.table(IDEMPOTENCY)?;
                let range = match after {
                    Some(a) => t.range::<&[u8]>((
                        std::ops::Bound::Excluded(a),
                        std::ops::Bound::Unbounded,
                    ))?,
                    None => t.range::<&[u8]>(..)?,
                };
                for e in range.take(max) {
                    let (k, v) = e?;
                    seen += 1;
                    let key = k.value().to_vec();
                    if let Ok(rec) = decode::<IdempotencyRecord>(v.value()) {
                        if let Some(new) = f(&key, &rec) {
                            changed.push((key.clone(), encode_record(&new)));
                        }
                    }
                    last = Some(key);
                }
            }
            let mut t = self.table(IDEMPOTENCY)?;
            for (k, v) in &changed {
                t.insert(k.as_slice(), v.as_slice())?;
            }
            Ok((changed.len(), last.filter(|_| seen == max)))
        })();
        self.track(r)
    }

    /// Rewrites stored events' `data` in place, for a start-up migration that needs what the
    /// store does not hold (the data key): `f` sees each event stored with its `data` (not
    /// the compact forms of deposit, payout, wallet and customer events) after `after`
    /// ((project, sequence)) and answers the `data` to store instead, or `None` to keep it;
    /// the event's id, type and time are kept. At most `max` rows are read. Answers how many
    /// were rewritten and the key of the last row read (`None` when the table was read to
    /// its end). A row that does not decode is left as it is (`appliance verify` reports it).
    pub fn rewrite_event_data(
        &mut self,
        after: Option<(u128, u64)>,
        max: usize,
        mut f: impl FnMut(&Event) -> Option<serde_json::Value>,
    ) -> Result<(usize, Option<(u128, u64)>), StoreError> {
        let r = (|| {
            let (mut changed, mut last, mut seen) = (Vec::new(), None, 0usize);
            {
                let t = self.table(EVENTS)?;
                let range = match after {
                    Some(a) => {
                        t.range((std::ops::Bound::Excluded(a), std::ops::Bound::Unbounded))?
                    }
                    None => t.range::<(u128, u64)>(..)?,
                };
                for e in range.take(max) {
                    let (k, v) = e?;
                    seen += 1;
                    let (project, seq) = k.value();
                    last = Some((project, seq));
                    let Ok(mut ev) = decode::<Event>(v.value()) else {
                        continue;
                    };
                    if ev.data.is_null() {
                        continue;
                    }
                    crate::ctx::event_id_in_full(&mut ev, seq);
                    ev.project_id = Uuid::from_u128(project);
                    ev.sequence = seq;
                    if let Some(data) = f(&ev) {
                        ev.data = data;
                        changed.push(((project, seq), crate::ctx::encode_event(&mut ev, None)));
                    }
                }
            }
            let mut t = self.table(EVENTS)?;
            for (k, v) in &changed {
                t.insert(*k, v.as_slice())?;
            }
            Ok((changed.len(), last.filter(|_| seen == max)))
        })();
        self.track(r)
    }

    /// Changes the ledger's holding of a deposit address (its open sweep unchanged).
    pub fn holding_add(
        &mut self,
        wallet: Uuid,
        asset: &str,
        delta: Delta,
    ) -> Result<u128, StoreError> {
        let key = self.holding_key_of_existing(wallet, asset)?;
        let cur = self.holding_at(&key)?;
        self.holding_put_at(&key, cur, delta)
    }

    /// [`WriteCtx::holding_add`] of a wallet the caller has just read (`w`), whose holding
    /// row it read in this job too (`held`, [`WriteCtx::holding_of`], not changed since):
    /// neither is read again (a test deposit and a caught-up one check the
    /// holding before crediting it). The open sweep stays `held`'s. Debug builds check
    /// `held` against the store.
    pub fn holding_add_from(
        &mut self,
        w: &crate::records::Wallet,
        asset: &str,
        held: Holding,
        delta: Delta,
    ) -> Result<u128, StoreError> {
        let key = w.holding_key(asset);
        debug_assert_eq!(
            self.holding_at(&key).ok(),
            Some(held),
            "the holding as the caller read it"
        );
        self.holding_put_at(&key, held, delta)
    }

    /// Records `sweep` as the open sweep of wallet `w` in `asset` (`None`: it has none), in
    /// the wallet's holding row ([`Holding`]; schema 8), its amount unchanged.
    pub fn open_sweep_set(
        &mut self,
        w: &crate::records::Wallet,
        asset: &str,
        sweep: Option<Uuid>,
    ) -> Result<(), StoreError> {
        let key = w.holding_key(asset);
        self.open_sweep_put_at(&key, sweep)
    }

    /// Clears the open sweep of `wallet` in `asset` when it is `sweep` (which is no longer
    /// open); another sweep recorded there stays.
    pub fn open_sweep_close(
        &mut self,
        wallet: Uuid,
        asset: &str,
        sweep: Uuid,
    ) -> Result<(), StoreError> {
        let key = self.holding_key_of_existing(wallet, asset)?;
        if self.holding_at(&key)?.open_sweep == Some(sweep) {
            self.open_sweep_put_at(&key, None)?;
        }
        Ok(())
    }

    fn holding_key_of_existing(&self, wallet: Uuid, asset: &str) -> Result<Vec<u8>, StoreError> {
        self.holding_key_of(wallet, asset)?
            .ok_or_else(|| StoreError::Corrupt(format!("holding of missing wallet {wallet}")))
    }

    fn open_sweep_put_at(&mut self, key: &[u8], sweep: Option<Uuid>) -> Result<(), StoreError> {
        let cur = self.holding_at(key)?;
        let next = Holding {
            open_sweep: sweep,
            ..cur
        };
        let r = self.with_accounts(|t| {
            t.insert(key, next.to_value())?;
            Ok(())
        });
        self.track(r)
    }

    fn holding_put_at(
        &mut self,
        key: &[u8],
        cur: Holding,
        delta: Delta,
    ) -> Result<u128, StoreError> {
        let next = Holding {
            amount: apply_delta(cur.amount, delta)?,
            ..cur
        };
        let r = self.with_accounts(|t| {
            t.insert(key, next.to_value())?;
            Ok(next.amount)
        });
        self.track(r)
    }

    /// Changes a simulated on-chain balance (test mode's chain state).
    pub fn sim_balance_add(
        &mut self,
        chain: &str,
        address: &str,
        asset: &str,
        delta: Delta,
    ) -> Result<u128, StoreError> {
        let cur = self.sim_balance(chain, address, asset)?;
        let next = apply_delta(cur, delta)?;
        self.insert_tracked(
            SIM_BALANCES,
            sim_key(chain, address, asset).as_slice(),
            next,
        )?;
        Ok(next)
    }

    /// Sets a value of the `meta` table.
    pub fn meta_put(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.insert_tracked(META, key, value)
    }

    /// Marks the live sweep `sweep` requested through `POST /v1/sweeps`.
    pub fn sweep_request_put(&mut self, sweep: Uuid) -> Result<(), StoreError> {
        self.insert_tracked(SWEEP_REQUESTS, sweep.as_u128(), ())
    }

    /// Counts one more new address for (project, day); returns the new count.
    pub fn addresses_issued_incr(&mut self, project: Uuid, day: u32) -> Result<u32, StoreError> {
        let n = self.addresses_issued(project, day)? + 1;
        self.insert_tracked(ADDRESS_QUOTA, (project.as_u128(), day), n)?;
        Ok(n)
    }

    /// Records the sender class a test transfer claimed for `from` on `chain`.
    pub fn test_sender_set(
        &mut self,
        chain: &str,
        from: &str,
        class: &str,
    ) -> Result<(), StoreError> {
        let key = format!("{chain}/{}", from.to_ascii_lowercase());
        self.insert_tracked(TEST_SENDERS, key.as_str(), class)
    }

    /// Sets a test project's clock offset (microseconds ahead of real time, DECISIONS.md
    /// section 15).
    pub fn test_clock_set(&mut self, project: Uuid, offset_us: i64) -> Result<(), StoreError> {
        self.touch(crate::Touched::test_clock(project));
        self.insert_tracked(TEST_CLOCKS, project.as_u128(), offset_us)
    }
}

/// A change to an unsigned balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delta {
    Add(u128),
    Sub(u128),
}

fn apply_delta(cur: u128, delta: Delta) -> Result<u128, StoreError> {
    let next = match delta {
        Delta::Add(a) => cur.checked_add(a),
        Delta::Sub(a) => cur.checked_sub(a),
    };
    next.ok_or_else(|| StoreError::Corrupt(format!("balance {cur} cannot take {delta:?}")))
}
