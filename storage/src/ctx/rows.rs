//! The row writes of a batch: a row put, replaced or deleted with its index entries in
//! step, keyed values, index and unique entries, and journal entries posted to the ledger.

use super::*;

impl WriteCtx<'_> {
    /// Inserts or replaces a row and keeps its index entries in step with its fields.
    pub fn put<R: Row + 'static>(&mut self, row: &R) -> Result<(), StoreError> {
        let old = self.get::<R>(row.id());
        let old = self.track(old)?;
        self.put_replacing(old.as_ref(), row)
    }

    /// [`WriteCtx::put`] of a row whose stored version the caller has just read (`old`,
    /// `None` when absent): the row is not read and decoded again to find the index
    /// entries it had. `old` must be what the store holds under `row`'s id.
    pub fn put_replacing<R: Row + 'static>(
        &mut self,
        old: Option<&R>,
        row: &R,
    ) -> Result<(), StoreError> {
        self.touched
            .push(Touched::row(row, old.and_then(Row::parent_id)));
        let r = self
            .before_rewrite(old)
            .and_then(|()| self.put_over_encoded(old, row, &encode_record(row)));
        self.track(r)
    }

    /// What must happen before stored row `old` is rewritten or removed: a customer's
    /// compact `customer.created` takes the row as it is ([`WriteCtx::pin_customer_created`]).
    fn before_rewrite<R: Row + 'static>(&self, old: Option<&R>) -> Result<(), StoreError> {
        let old = old.map(|o| o as &dyn std::any::Any);
        match old.and_then(|o| o.downcast_ref::<crate::records::Customer>()) {
            Some(c) => self.pin_customer_created(c),
            None => Ok(()),
        }
    }

    /// [`WriteCtx::put_replacing`]`(None, row)` of a row with a new id (nothing stored
    /// under it), its value encoded beforehand off the writer thread ([`EncodedRow::of`]
    /// of this very `row`: debug builds check it).
    pub fn put_new_encoded<R: Row + 'static>(
        &mut self,
        row: &R,
        encoded: &EncodedRow<R>,
    ) -> Result<(), StoreError> {
        debug_assert!(
            encode_record(row) == encoded.bytes,
            "an encoded row is the encoding of the row it is written with"
        );
        self.touched.push(Touched::row(row, None));
        let r = self.put_over_encoded(None, row, &encoded.bytes);
        self.track(r)
    }

    fn put_over_encoded<R: Row>(
        &self,
        old: Option<&R>,
        row: &R,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let new_keys = row.index_keys();
        let old_keys = old.map(|o| o.index_keys()).unwrap_or_default();
        let mut counted: Vec<(Vec<u8>, bool)> = Vec::new();
        for k in &old_keys {
            if !new_keys.contains(k) && self.row_index_remove(k)? {
                if let Some(c) = index::counter_key(k) {
                    counted.push((c.to_vec(), false));
                }
            }
        }
        for k in &new_keys {
            // An entry the stored row already has is in the index: inserting it again
            // would rewrite (dirty) its page for nothing (pages per commit).
            if old_keys.contains(k) {
                continue;
            }
            if self.row_index_insert(k)? {
                if let Some(c) = index::counter_key(k) {
                    counted.push((c.to_vec(), true));
                }
            }
        }
        if !counted.is_empty() {
            self.with_counters(|counters| {
                for (c, up) in counted {
                    let cur = counters.get(c.as_slice())?.map(|g| g.value()).unwrap_or(0);
                    let next = if up { cur + 1 } else { cur.saturating_sub(1) };
                    counters.insert(c.as_slice(), next)?;
                }
                Ok(())
            })?;
        }
        self.with_rows(R::TABLE, |t| {
            t.insert(row.id().as_u128(), bytes)?;
            Ok(())
        })
    }

    /// Writes index key `k` of a row: into its tag's index table, or into its run
    /// ([`crate::id_runs::run_of_key`], schema 14 and 15). Whether it was not there.
    fn row_index_insert(&self, k: &[u8]) -> Result<bool, StoreError> {
        if let Some(runs) = crate::id_runs::run_of_key(k) {
            return self.with_runs(runs.table, |t, tails| {
                crate::id_runs::add_to_tail(t, tails, k)
            });
        }
        self.with_index_write(k, |idx| Ok(idx.insert(k, ())?.is_none()))
    }

    /// Removes index key `k` of a row, wherever [`WriteCtx::row_index_insert`] writes it.
    /// Whether it was there.
    fn row_index_remove(&self, k: &[u8]) -> Result<bool, StoreError> {
        if let Some(runs) = crate::id_runs::run_of_key(k) {
            return self.with_runs(runs.table, |t, tails| {
                if let Some((prefix, _)) = crate::id_runs::split_key(k) {
                    crate::held::forget(t, tails, prefix)?;
                }
                crate::id_runs::remove(t, k)
            });
        }
        self.with_index_write(k, |idx| Ok(idx.remove(k)?.is_some()))
    }

    /// Removes a row and all its index entries; returns it (`None` when absent, nothing
    /// written).
    pub fn delete<R: Row + 'static>(&mut self, id: Uuid) -> Result<Option<R>, StoreError> {
        let Some(old) = self.get::<R>(id)? else {
            return Ok(None);
        };
        self.touched.push(Touched::row(&old, None));
        let r = (|| {
            self.before_rewrite(Some(&old))?;
            let mut counted: Vec<Vec<u8>> = Vec::new();
            for k in old.index_keys() {
                if self.row_index_remove(&k)? {
                    if let Some(c) = index::counter_key(&k) {
                        counted.push(c.to_vec());
                    }
                }
            }
            if !counted.is_empty() {
                self.with_counters(|counters| {
                    for c in counted {
                        let cur = counters.get(c.as_slice())?.map(|g| g.value()).unwrap_or(0);
                        counters.insert(c.as_slice(), cur.saturating_sub(1))?;
                    }
                    Ok(())
                })?;
            }
            self.with_rows(R::TABLE, |t| {
                t.remove(id.as_u128())?;
                Ok(())
            })
        })();
        self.track(r)?;
        Ok(Some(old))
    }

    /// Stores `value` under `key` in `def` through [`crate::codec::encode`] (see
    /// [`ValueOps`]).
    pub fn value_put<K, T>(
        &mut self,
        def: TableDefinition<K, &'static [u8]>,
        key: K::SelfType<'_>,
        value: &T,
    ) -> Result<(), StoreError>
    where
        K: Key + 'static,
        T: serde::Serialize + ?Sized,
    {
        let bytes = encode(value);
        let r = (|| {
            let mut t = self.table(def)?;
            t.insert(key, bytes.as_slice())?;
            Ok(())
        })();
        self.track(r)
    }

    /// Adds a bare index key (markers that belong to no row), to the table of its tag
    /// ([`index_table_of`]).
    pub fn index_insert(&mut self, key: &[u8]) -> Result<(), StoreError> {
        let r = self.with_index_write(key, |t| {
            t.insert(key, ())?;
            Ok(())
        });
        self.track(r)
    }

    /// Removes a bare index key.
    pub fn index_remove(&mut self, key: &[u8]) -> Result<(), StoreError> {
        let r = self.with_index_write(key, |t| {
            t.remove(key)?;
            Ok(())
        });
        self.track(r)
    }

    /// Claims a unique key for `id`.
    pub fn unique_put(&mut self, key: &[u8], id: Uuid) -> Result<(), StoreError> {
        let r = self.with_unique(|t| {
            t.insert(key, id.as_u128())?;
            Ok(())
        });
        self.track(r)
    }

    /// Releases a unique key.
    pub fn unique_remove(&mut self, key: &[u8]) -> Result<(), StoreError> {
        let r = self.with_unique(|t| {
            t.remove(key)?;
            Ok(())
        });
        self.track(r)
    }

    /// Posts a journal entry. Checks balance and the no-negative rule before writing
    /// anything, so an `Err` leaves the job clean.
    pub fn post(&mut self, entry: &JournalEntry) -> Result<Result<(), LedgerError>, StoreError> {
        let mut balances = BTreeMap::new();
        for p in &entry.postings {
            balances.insert(p.account.clone(), self.balance(&p.account)?);
        }
        if let Err(e) = ledger::apply(entry, &mut balances) {
            return Ok(Err(e));
        }
        let r = (|| {
            self.with_accounts(|acc| {
                for (a, b) in &balances {
                    acc.insert(a.key().as_slice(), (b.debits, b.credits))?;
                }
                Ok(())
            })?;
            let bytes = encode_record(entry);
            self.with_rows(JOURNAL, |j| {
                j.insert(entry.id.as_u128(), bytes.as_slice())?;
                Ok(())
            })
        })();
        self.track(r).map(Ok)
    }
}
