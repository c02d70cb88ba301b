//! Open sweeps that wait below their chain's threshold, remembered between sender passes.
//!
//! Without this memory a sender pass reads every open sweep of its chain (the sweep, its
//! project, its wallet, its address's holding, its request flag) to decide again that it
//! waits below `sweep_threshold_usd_cents` (docs/decisions.md, Market prices). Those waiting
//! sweeps are the many: one per address holding a small balance. At 100,000 of them and the
//! default `poll_interval_ms` of 1,000 that is most of a core, all the time, to decide
//! nothing.
//!
//! What decides that a sweep waits, and what changes it:
//! - its amount (`min(sweep amount, holding)`) and its request flag: the amount only rises
//!   through a write of the sweep row (a credit adds to it, `POST /v1/sweeps` rewrites it
//!   before it records the request), and every row write is named to the store's commit
//!   hooks (`SweepChanges::hook`). A holding that falls only lowers the amount, and a
//!   lower amount waits too (down to 0, which a full pass then skips as `nothing_to_sweep`);
//! - the price: [`crate::market::Market::generation`] moves with every price stored;
//! - the chain's threshold and the project's mode: fixed while the process runs.
//!
//! So a pass leaves out a sweep it found waiting until that sweep's row is written again or a
//! price changes. Every [`FULL_PASS_EVERY`], and whenever the change log has dropped entries
//! the sender did not read, a pass reads every open sweep again: nothing can be left out for
//! longer than that, whatever was missed.
//!
//! Between full passes a pass does not scan the sweeps' work index either. It reads a
//! queue ([`WaitingSweeps`]): the work index as the last full pass read it, less the sweeps
//! found waiting, another sender's, or no longer open, plus the sweeps written since. A sweep
//! enters or leaves the work index only with a write of its row (the index entry is derived
//! from the row's status), so the queue holds every open sweep of this sender not known to
//! wait. The queue is in the order a full pass reads the index (oldest first), and a pass
//! reads it a chunk at a time, so a pass costs what it reads, not what waits. A scan of the
//! work index and its filter would cost a pass 1.5 ms at 20,000 waiting sweeps, and about a
//! quarter of a core at 1M in test mode while the sender works through a backlog 64 sweeps
//! a pass.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::time::{Duration, Instant};

use uuid::Uuid;

pub use crate::services::sweeps::SweepChanges;

/// Longest time a waiting sweep goes unread: a pass after this reads every open sweep.
pub const FULL_PASS_EVERY: Duration = Duration::from_secs(60);

/// What one sender remembers between its passes (keep one per sender): the open sweeps
/// found waiting, and the payouts reported as waiting for a sweep.
#[derive(Default)]
pub struct Waiting {
    pub sweeps: WaitingSweeps,
    pub payouts: WaitingPayouts,
}

/// Payouts already reported as waiting for a sweep, so the wait is logged once per payout
/// rather than on every sender pass. Bounded: cleared when it grows past
/// [`WaitingPayouts::MAX`].
#[derive(Default)]
pub struct WaitingPayouts(std::collections::HashSet<Uuid>);

impl WaitingPayouts {
    /// Most payouts remembered.
    const MAX: usize = 10_000;

    /// Payout `id` of `chain` waits for a sweep this pass: logged at `info` the first time.
    pub fn note(&mut self, chain: &str, id: Uuid) {
        if self.0.len() >= Self::MAX {
            self.0.clear();
        }
        if self.0.insert(id) {
            tracing::info!(chain, payout = %id, "payout waits: the master wallet does not hold it yet and a sweep of the coin is on its way");
        } else {
            tracing::debug!(chain, payout = %id, "payout still waits for a sweep");
        }
    }

    /// Payout `id` no longer waits.
    pub fn forget(&mut self, id: Uuid) {
        self.0.remove(&id);
    }
}

/// One sender's memory of the open sweeps it found waiting (module doc): the queue of the
/// sweeps its next pass looks at.
#[derive(Default)]
pub struct WaitingSweeps {
    /// The sweeps the next pass looks at, oldest first (ascending id, the order a sender
    /// takes the work index in): the work index as the last full pass read it, less the
    /// sweeps found waiting or passed over since, plus the sweeps written since. `None`
    /// until a full pass gives its list ([`WaitingSweeps::looked_at`]).
    queue: Option<BTreeSet<Uuid>>,
    /// The change log's position this memory is exact at.
    position: u64,
    /// [`crate::market::Market::generation`] when the waiting sweeps were decided.
    prices: u64,
    /// When a pass last read every open sweep; `None` before the first.
    full_at: Option<Instant>,
}

impl WaitingSweeps {
    /// Starts a pass at `now` with the market's price generation `prices`. Returns `true`
    /// for a full pass: prices moved, the log no longer holds every change, [`FULL_PASS_EVERY`]
    /// has passed, or no full pass has given its list yet. The queue is then forgotten; the
    /// caller reads the work index and gives its ids to [`WaitingSweeps::looked_at`].
    /// Otherwise the sweeps written since the last pass join the queue (whether or not
    /// they waited).
    ///
    /// Call it before the pass reads the store, so that a write it does not see is in the
    /// next pass's changes.
    pub fn begin_pass(&mut self, changes: &SweepChanges, prices: u64, now: Instant) -> bool {
        let due = self
            .full_at
            .is_none_or(|t| now.saturating_duration_since(t) >= FULL_PASS_EVERY);
        let read = (!due && prices == self.prices)
            .then(|| changes.since(self.position))
            .flatten();
        match (read, self.queue.as_mut()) {
            (Some((written, end)), Some(queue)) => {
                queue.extend(written);
                self.position = end;
                false
            }
            _ => {
                self.queue = None;
                self.position = changes.position();
                self.prices = prices;
                self.full_at = Some(now);
                true
            }
        }
    }

    /// Gives a full pass's list: the work index's ids as it read them. A full pass whose
    /// read failed gives none, and the next pass is full again.
    pub fn looked_at(&mut self, ids: impl IntoIterator<Item = Uuid>) {
        self.queue = Some(ids.into_iter().collect());
    }

    /// Up to `n` queued sweeps newer than `after` (from the start when `None`), oldest
    /// first: a pass reads the queue a chunk at a time, each chunk after the last one's end.
    pub fn next_ids(&self, after: Option<Uuid>, n: usize) -> Vec<Uuid> {
        let Some(queue) = &self.queue else {
            return Vec::new();
        };
        match after {
            Some(a) => queue
                .range((Bound::Excluded(a), Bound::Unbounded))
                .take(n)
                .copied()
                .collect(),
            None => queue.iter().take(n).copied().collect(),
        }
    }

    /// Whether sweep `id` is out of the queue: found waiting or another sender's, and not
    /// written since.
    #[cfg(test)]
    pub fn skips(&self, id: &Uuid) -> bool {
        self.queue.as_ref().is_some_and(|q| !q.contains(id))
    }

    /// Records that this pass found sweep `id` waiting below the threshold or for a price:
    /// out of the queue until its row is written again or the next full pass.
    pub fn waits(&mut self, id: Uuid) {
        if let Some(q) = &mut self.queue {
            q.remove(&id);
        }
    }

    /// Records that sweep `id` is not this sender's to sign: another chain's, a project
    /// this worker does not serve, or no longer open (or gone). Out of the queue like a
    /// waiting one, until its row is written again or the next full pass.
    pub fn passes_over(&mut self, id: Uuid) {
        self.waits(id);
    }

    /// How many sweeps the next pass looks at.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.queue.as_ref().map_or(0, BTreeSet::len)
    }

    /// Whether the next pass has no sweep to look at (or no queue yet).
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use appliance_storage::records::Sweep;
    use appliance_storage::Touched;
    use std::sync::Arc;

    fn touched_sweep(id: Uuid) -> Touched {
        Touched {
            kind: std::any::TypeId::of::<Sweep>(),
            id,
            project: Uuid::nil(),
            parent: None,
            old_parent: None,
        }
    }

    /// Ids in work-index order.
    fn sorted(mut ids: Vec<Uuid>) -> Vec<Uuid> {
        ids.sort_unstable();
        ids
    }

    /// The whole queue, as a pass reads it in chunks of two.
    fn queue(w: &WaitingSweeps) -> Vec<Uuid> {
        let mut all = Vec::new();
        loop {
            let chunk = w.next_ids(all.last().copied(), 2);
            if chunk.is_empty() {
                return all;
            }
            all.extend(chunk);
        }
    }

    #[test]
    fn a_waiting_sweep_is_left_out_until_its_row_is_written_again() {
        let changes = Arc::new(SweepChanges::default());
        let hook = changes.hook();
        let [a, b, c, d, e] = [(); 5].map(|_| Uuid::now_v7());
        let t0 = Instant::now();
        let mut w = WaitingSweeps::default();
        assert!(w.begin_pass(&changes, 0, t0), "the first pass is full");
        assert!(
            queue(&w).is_empty(),
            "no list before the full pass gives it"
        );
        w.looked_at(sorted(vec![c, a, b, e]));
        assert_eq!(queue(&w), sorted(vec![a, b, c, e]), "in work-index order");
        w.waits(a);
        w.waits(b);
        // `e` is no longer open, or another chain's; `c` did not wait (signed, or not
        // reached by the pass): looked at again.
        w.passes_over(e);
        assert!(!w.begin_pass(&changes, 0, t0 + Duration::from_secs(1)));
        assert_eq!(queue(&w), vec![c]);
        assert!(w.skips(&a) && w.skips(&b) && w.skips(&e) && !w.skips(&c));
        // A write of `a` (a credit added to it, or a request) brings it back, a new sweep
        // `d` comes in through its first write; a row of another kind changes nothing.
        hook(&[touched_sweep(a)]);
        hook(&[touched_sweep(d)]);
        hook(&[Touched {
            kind: std::any::TypeId::of::<appliance_storage::records::Wallet>(),
            ..touched_sweep(b)
        }]);
        assert!(!w.begin_pass(&changes, 0, t0 + Duration::from_secs(2)));
        assert_eq!(queue(&w), sorted(vec![a, c, d]), "in work-index order");
        assert!(!w.skips(&a), "written since: read again");
        assert!(w.skips(&b));
        assert_eq!(w.len(), 3);
        // Written twice, queued once; the queue carries over from pass to pass.
        hook(&[touched_sweep(c)]);
        hook(&[touched_sweep(c)]);
        w.waits(d);
        assert!(!w.begin_pass(&changes, 0, t0 + Duration::from_secs(3)));
        assert_eq!(queue(&w), sorted(vec![a, c]));
        assert_eq!(w.next_ids(None, 1), vec![sorted(vec![a, c])[0]]);
    }

    #[test]
    fn prices_time_and_a_lost_change_make_a_full_pass() {
        let changes = Arc::new(SweepChanges::default());
        let hook = changes.hook();
        let a = Uuid::now_v7();
        let t0 = Instant::now();
        let mut w = WaitingSweeps::default();
        assert!(w.begin_pass(&changes, 7, t0));
        w.looked_at([a]);
        w.waits(a);
        // A price stored since.
        assert!(w.begin_pass(&changes, 8, t0));
        assert!(!w.skips(&a), "the queue is forgotten");
        w.looked_at([a]);
        w.waits(a);
        let before = t0 + FULL_PASS_EVERY - Duration::from_millis(1);
        assert!(!w.begin_pass(&changes, 8, before));
        assert!(w.is_empty() && w.skips(&a));
        assert!(w.begin_pass(&changes, 8, t0 + FULL_PASS_EVERY));
        assert!(!w.skips(&a), "a full pass at least every FULL_PASS_EVERY");
        // A full pass whose read of the work index failed gave no list: the next is full.
        let t1 = t0 + FULL_PASS_EVERY;
        assert!(w.begin_pass(&changes, 8, t1));
        w.looked_at([a]);
        // More writes than the log keeps, none of them `a`'s: `a`'s own write may have
        // been among those dropped, so everything is read again.
        w.waits(a);
        for _ in 0..=SweepChanges::CAPACITY {
            hook(&[touched_sweep(Uuid::now_v7())]);
        }
        assert!(w.begin_pass(&changes, 8, t1 + Duration::from_secs(1)));
        assert!(
            !w.skips(&a),
            "the log dropped changes this sender had not read"
        );
        // From the new position, the log is read again.
        w.looked_at([a]);
        w.waits(a);
        let e = Uuid::now_v7();
        hook(&[touched_sweep(e)]);
        assert!(!w.begin_pass(&changes, 8, t1 + Duration::from_secs(2)));
        assert_eq!(queue(&w), vec![e]);
        assert!(w.skips(&a));
    }
}
