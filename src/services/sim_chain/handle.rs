//! One opened simulated chain ([`SimHandle`]): reserving blocks, mining, reorgs, flushes
//! and snapshots, each with the chain held as its change needs.

use super::*;

impl SimHandle {
    /// The chain for a change other than a block reservation (mining, a reorg, a flush):
    /// waits for the reservations in flight to settle and keeps new ones out until dropped.
    /// A chain that lost a write is rebuilt from the store first.
    pub async fn exclusive(&self, store: &Store) -> Result<Exclusive<'_>, SimOpenError> {
        let gate = self.gate.write().await;
        let mut chain = self.client.chain_state().lock().await;
        let lost = self.flight.lock().expect("lock").lost;
        if lost {
            tracing::warn!(chain = self.chain, project = %self.project, "rebuilding a simulated chain from its stored operations");
            self.reload(&mut chain, store).await?;
        }
        Ok(Exclusive { _gate: gate, chain })
    }

    /// Reserves the next block for one request's operation (see the module documentation).
    /// Returns the guard that keeps exclusive changes out until the reservation is settled,
    /// and the chain lock: the caller queues its store job ([`Store::enqueue`]) before
    /// dropping it, then awaits the commit and calls [`SimHandle::settle`] in every case
    /// (also when the job could not be queued). Run it in a task of its own, so a
    /// cancelled request still settles.
    pub async fn reserve_block(
        &self,
        store: &Store,
        now_ms: u64,
    ) -> Result<
        (
            RwLockReadGuard<'_, ()>,
            MutexGuard<'_, SimChain>,
            Reservation,
        ),
        SimOpenError,
    > {
        loop {
            let gate = self.gate.read().await;
            let mut c = self.client.chain_state().lock().await;
            if self.flight.lock().expect("lock").lost {
                drop(c);
                drop(gate);
                drop(self.exclusive(store).await?);
                continue;
            }
            let mut f = self.flight.lock().expect("lock");
            let last = if f.blocks > 0 {
                f.last_time_ms
            } else {
                c.block(c.head()).map(|b| b.timestamp * 1000).unwrap_or(0)
            };
            let time_ms = last.max(now_ms);
            let r = Reservation {
                project: self.project,
                chain: self.chain,
                seq: self.next_seq.load(Ordering::SeqCst),
                unflushed: c.take_unflushed(),
                block: c.head() + f.blocks + 1,
                time_ms,
            };
            self.next_seq.fetch_add(r.count(), Ordering::SeqCst);
            f.blocks += 1;
            f.last_time_ms = time_ms;
            drop(f);
            return Ok((gate, c, r));
        }
    }

    /// After the store answered for reservation `r`: `written` is the block's operation it
    /// wrote (the transfer, or the empty block of a refused request), `None` when it wrote
    /// nothing. Applies in memory, in sequence order, every settled reservation no earlier
    /// one is waiting for. An operation not written marks the chain for a rebuild.
    pub fn settle(&self, c: &mut SimChain, r: Reservation, written: Option<Op>) {
        let mut f = self.flight.lock().expect("lock");
        f.settled.insert(r.seq, (r.count(), written));
        loop {
            let applied = f.applied;
            let Some(e) = f.settled.first_entry() else {
                break;
            };
            if *e.key() != applied {
                break;
            }
            let (n, op) = e.remove();
            f.applied += n;
            f.blocks -= 1;
            match op {
                Some(op) if !f.lost => {
                    if let Err(e) = c.apply(&op) {
                        tracing::error!(error = %e, chain = self.chain, project = %self.project, "a written operation does not apply to the simulated chain");
                        f.lost = true;
                    }
                }
                Some(_) => {}
                None => f.lost = true,
            }
        }
    }

    /// Sets the next sequence number (written and applied) after an exclusive write.
    fn advance(&self, n: u64) {
        let seq = self.next_seq.fetch_add(n, Ordering::SeqCst) + n;
        self.flight.lock().expect("lock").applied = seq;
    }

    /// A cursor for a store transaction, taken under an exclusive hold of the chain `x`
    /// (the deferred operations move into it; [`SimHandle::committed`] or
    /// [`SimHandle::failed`] settles).
    pub fn cursor(&self, x: &mut Exclusive<'_>, now_ms: u64) -> SimCursor {
        let c = &mut *x.chain;
        let next_time_ms = c
            .block(c.head())
            .map(|b| b.timestamp * 1000)
            .unwrap_or(0)
            .max(now_ms);
        SimCursor {
            project: self.project,
            chain: self.chain,
            seq: self.next_seq.load(Ordering::SeqCst),
            unflushed: c.take_unflushed(),
            next_block: c.head() + 1,
            next_time_ms,
        }
    }

    /// After the transaction holding `cursor` and `ops` committed: applies `planned` (the
    /// operations built but not yet applied in memory) and advances the sequence number.
    pub fn committed(
        &self,
        c: &mut SimChain,
        cursor: &SimCursor,
        written: &[Op],
        planned: &[Op],
    ) -> Result<(), appliance_chains::sim::SimError> {
        self.advance(cursor.count(written));
        for op in planned {
            c.apply(op)?;
        }
        Ok(())
    }

    /// After the transaction holding `cursor` did not commit: the deferred operations wait
    /// for the next write again.
    pub fn failed(&self, c: &mut SimChain, cursor: SimCursor) {
        c.restore_unflushed(cursor.unflushed);
    }

    /// Rebuilds the chain from its stored operations, after changes applied in memory
    /// could not be written (the mempool is lost, as in a restart).
    pub async fn reload(&self, c: &mut SimChain, store: &Store) -> Result<(), SimOpenError> {
        let (project, chain) = (self.project, self.chain);
        let g = c.genesis().clone();
        let min_ops = self.snap.lock().expect("lock").min_ops;
        let retain = c.retain_blocks();
        let loaded = store
            .read(move |r| {
                Ok(load(r, g, project, chain, min_ops, retain)
                    .map_err(|e| StoreError::Corrupt(e.to_string())))
            })
            .await??;
        *c = loaded.chain;
        let seq = loaded.next_seq;
        *self.snap.lock().expect("lock") = loaded.snap;
        self.next_seq.store(seq, Ordering::SeqCst);
        let mut f = self.flight.lock().expect("lock");
        debug_assert_eq!(f.blocks, 0, "a reload with reservations in flight");
        *f = Flight {
            applied: seq,
            ..Flight::default()
        };
        Ok(())
    }

    /// Under an exclusive hold of `c`, whose memory is the state after every operation up
    /// to the ones `cursor` writes with `written`: the snapshot to write with them, when one
    /// is due ([`SnapState::due`]).
    fn plan_snapshot(
        &self,
        c: &SimChain,
        cursor: &SimCursor,
        written: &[Op],
    ) -> Option<PlannedSnapshot> {
        let next = cursor.seq + cursor.count(written);
        if next == 0 || !self.snap.lock().expect("lock").due(next) {
            return None;
        }
        let t0 = std::time::Instant::now();
        let bytes = encode_snapshot(&c.snapshot());
        Some(PlannedSnapshot {
            project: self.project,
            chain: self.chain,
            at: next - 1,
            bytes,
            entries: snapshot_entries(c),
            encode_ms: t0.elapsed().as_millis() as u64,
        })
    }

    /// After the transaction holding `s` committed (`since`: when it was queued): the log
    /// now begins at it.
    fn snapshotted(&self, s: &PlannedSnapshot, since: std::time::Instant) {
        let mut st = self.snap.lock().expect("lock");
        let ops = s.at - st.at;
        st.at = s.at;
        st.size_ops = size_ops(s.bytes.len());
        st.extra = 0;
        tracing::info!(chain = self.chain, project = %self.project, seq = s.at, ops, entries = s.entries,
            bytes = s.bytes.len(), encode_ms = s.encode_ms, commit_ms = since.elapsed().as_millis() as u64,
            "simulated chain snapshotted");
    }

    /// Whether a snapshot would be due with one more operation written.
    fn snapshot_near(&self) -> bool {
        let next = self.next_seq.load(Ordering::SeqCst);
        self.snap.lock().expect("lock").due(next + 1)
    }

    /// Mines `count` blocks now (`step_ms` apart) and writes them with the deferred
    /// operations in one store transaction, unless every mined block is empty and `defer`
    /// allows keeping them in memory until the next write (and no snapshot is due). Writes
    /// a snapshot with them when one is due. Returns the new head.
    pub async fn mine(
        &self,
        store: &Store,
        count: u64,
        step_ms: u64,
        defer: bool,
    ) -> Result<u64, SimOpenError> {
        let mut x = self.exclusive(store).await?;
        let c = &mut *x.chain;
        let ops = c.mine(count, now_ms(), step_ms);
        let head = c.head();
        let ops = if defer && !self.snapshot_near() {
            match c.defer(ops) {
                Ok(()) => return Ok(head),
                Err(ops) => ops,
            }
        } else {
            ops
        };
        let cursor = self.cursor(&mut x, 0);
        let c = &mut *x.chain;
        let snap = self.plan_snapshot(c, &cursor, &ops);
        let since = std::time::Instant::now();
        let wrote = write_ops(store, &cursor, ops.clone(), snap.clone()).await;
        match wrote {
            Ok(()) => {
                match &snap {
                    Some(s) => self.snapshotted(s, since),
                    None => {
                        let mut st = self.snap.lock().expect("lock");
                        st.extra = st.extra.saturating_add(signed_weight(&ops));
                    }
                }
                self.committed(c, &cursor, &ops, &[])
                    .map_err(|e| SimOpenError::Replay {
                        project: self.project,
                        chain: self.chain.into(),
                        detail: e.to_string(),
                    })?;
                Ok(head)
            }
            Err(e) => {
                tracing::error!(error = ?e, chain = self.chain, "writing simulated blocks failed");
                self.reload(c, store).await?;
                Err(SimOpenError::Write(write_error(e)))
            }
        }
    }

    /// Writes the deferred empty blocks, if any, and a snapshot when one is due (the
    /// timer's periodic flush).
    pub async fn flush(&self, store: &Store) -> Result<(), SimOpenError> {
        let mut x = self.exclusive(store).await?;
        let next = self.next_seq.load(Ordering::SeqCst);
        let due = next > 0 && self.snap.lock().expect("lock").due(next);
        if !x.chain.has_unflushed() && !due {
            return Ok(());
        }
        let cursor = self.cursor(&mut x, 0);
        let snap = self.plan_snapshot(&x.chain, &cursor, &[]);
        let since = std::time::Instant::now();
        let wrote = write_ops(store, &cursor, Vec::new(), snap.clone()).await;
        match wrote {
            Ok(()) => {
                if let Some(s) = &snap {
                    self.snapshotted(s, since);
                }
                self.advance(cursor.count(&[]));
                Ok(())
            }
            Err(e) => {
                self.failed(&mut x.chain, cursor);
                Err(SimOpenError::Write(write_error(e)))
            }
        }
    }
}

/// Writes `cursor`'s deferred operations, then `ops`, and the snapshot `snap` when one is
/// due, in one store transaction.
async fn write_ops(
    store: &Store,
    cursor: &SimCursor,
    ops: Vec<Op>,
    snap: Option<PlannedSnapshot>,
) -> Result<(), WriteError<StoreError>> {
    let cursor = cursor.clone();
    store
        .write(move |ctx| {
            cursor.write(ctx, &ops)?;
            if let Some(s) = &snap {
                s.write(ctx)?;
            }
            Ok(())
        })
        .await
}
