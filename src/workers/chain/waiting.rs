//! Open sweeps that wait below their chain's threshold, remembered between sender passes.
//!
//! A sender pass used to read every open sweep of its chain (the sweep, its project, its
//! wallet, its address's holding, its request flag) to decide again that it waits below
//! `sweep_threshold_usd_cents` (docs/decisions.md, Market prices). Those waiting sweeps are
//! the many: one per address holding a small balance. At 100,000 of them and the default
//! `poll_interval_ms` of 1,000 that was most of a core, all the time, to decide nothing.
//!
//! What decides that a sweep waits, and what changes it:
//! - its amount (`min(sweep amount, holding)`) and its request flag: the amount only rises
//!   through a write of the sweep row (a credit adds to it, `POST /v1/sweeps` rewrites it
//!   before it records the request), and every row write is named to the store's commit
//!   hooks ([`SweepChanges::hook`]). A holding that falls only lowers the amount, and a
//!   lower amount waits too (down to 0, which a full pass then skips as `nothing_to_sweep`);
//! - the price: [`crate::market::Market::generation`] moves with every price stored;
//! - the chain's threshold and the project's mode: fixed while the process runs.
//!
//! So a pass leaves out a sweep it found waiting until that sweep's row is written again or a
//! price changes. Every [`FULL_PASS_EVERY`], and whenever the change log has dropped entries
//! the sender did not read, a pass reads every open sweep again: nothing can be left out for
//! longer than that, whatever was missed.
//!
//! Between full passes a pass does not scan the sweeps' work index either: it looks at the
//! sweeps the last pass looked at and did not find waiting, and at the sweeps written since
//! ([`WaitingSweeps::begin_pass`] gives the list). A sweep enters or leaves the work index
//! only with a write of its row (the index entry is derived from the row's status), so
//! that list holds every open sweep not known to wait. The scan was what was left of a
//! pass's cost at many waiting sweeps: 1.5 ms at 20,000, about 0.3 of a core at 1M in test
//! mode.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use appliance_storage::records::Sweep;
use appliance_storage::{CommitHook, Touched};
use uuid::Uuid;

/// Longest time a waiting sweep goes unread: a pass after this reads every open sweep.
pub const FULL_PASS_EVERY: Duration = Duration::from_secs(60);

/// Sweep rows written since the start, newest last, at most [`SweepChanges::CAPACITY`] of
/// them: what the commit hook heard, for the senders to read from their own position.
#[derive(Default)]
pub struct SweepChanges {
    log: Mutex<ChangeLog>,
}

#[derive(Default)]
struct ChangeLog {
    /// Position after the newest entry (entries ever pushed).
    end: u64,
    /// The newest entries; `ids[i]` is at position `end - ids.len() + i`.
    ids: VecDeque<Uuid>,
}

impl SweepChanges {
    /// Entries kept (16 B each): a sender further behind than this reads every open sweep.
    pub const CAPACITY: usize = 65_536;

    /// The store's commit hook that logs every sweep row a committed batch wrote.
    pub fn hook(self: &Arc<Self>) -> CommitHook {
        let me = self.clone();
        Arc::new(move |touched: &[Touched]| {
            let mut sweeps = touched.iter().filter(|t| t.is::<Sweep>()).peekable();
            if sweeps.peek().is_none() {
                return;
            }
            let mut log = me.log.lock().unwrap_or_else(|e| e.into_inner());
            for t in sweeps {
                log.push(t.id);
            }
        })
    }

    /// The position after the newest entry: read it before a pass reads the store.
    pub fn position(&self) -> u64 {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).end
    }

    /// The sweeps written from position `from` to the end, and the end; `None` when some
    /// of them are no longer kept.
    fn since(&self, from: u64) -> Option<(Vec<Uuid>, u64)> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let first = log.end - log.ids.len() as u64;
        if from < first || from > log.end {
            return None;
        }
        let skip = (from - first) as usize;
        Some((log.ids.iter().skip(skip).copied().collect(), log.end))
    }
}

impl ChangeLog {
    fn push(&mut self, id: Uuid) {
        if self.ids.len() == SweepChanges::CAPACITY {
            self.ids.pop_front();
        }
        self.ids.push_back(id);
        self.end += 1;
    }
}

/// One sender's memory of the open sweeps it found waiting (module doc).
#[derive(Default)]
pub struct WaitingSweeps {
    waiting: HashSet<Uuid>,
    /// The change log's position this memory is exact at.
    position: u64,
    /// [`crate::market::Market::generation`] when the waiting sweeps were decided.
    prices: u64,
    /// When a pass last read every open sweep; `None` before the first.
    full_at: Option<Instant>,
    /// The sweeps the last pass looked at, in work-index order; `None` when no pass since
    /// the last full one ([`WaitingSweeps::looked_at`]) has a complete list.
    last: Option<Vec<Uuid>>,
}

impl WaitingSweeps {
    /// Starts a pass at `now` with the market's price generation `prices`, and says which
    /// sweeps it looks at:
    /// - `Some(ids)`: the sweeps the last pass looked at, less those it found waiting, and
    ///   the sweeps written since, in work-index order (ascending id) without repeats. The
    ///   written ones are forgotten as waiting;
    /// - `None`: a full pass, when prices moved, the log no longer holds every change,
    ///   [`FULL_PASS_EVERY`] has passed, or the last full pass has not given its list.
    ///   Everything is forgotten; the caller reads the work index and gives its ids to
    ///   [`WaitingSweeps::looked_at`].
    ///
    /// Call it before the pass reads the store, so that a write it does not see is in the
    /// next pass's changes.
    pub fn begin_pass(
        &mut self,
        changes: &SweepChanges,
        prices: u64,
        now: Instant,
    ) -> Option<Vec<Uuid>> {
        let due = self
            .full_at
            .is_none_or(|t| now.saturating_duration_since(t) >= FULL_PASS_EVERY);
        let read = (!due && prices == self.prices && self.last.is_some())
            .then(|| changes.since(self.position))
            .flatten();
        match read {
            Some((written, end)) => {
                for id in &written {
                    self.waiting.remove(id);
                }
                self.position = end;
                let last = self.last.take().unwrap_or_default();
                let mut ids: Vec<Uuid> = last
                    .into_iter()
                    .filter(|id| !self.waiting.contains(id))
                    .chain(written)
                    .collect();
                ids.sort_unstable();
                ids.dedup();
                self.last = Some(ids.clone());
                Some(ids)
            }
            None => {
                self.waiting.clear();
                self.last = None;
                self.position = changes.position();
                self.prices = prices;
                self.full_at = Some(now);
                None
            }
        }
    }

    /// Records the work index's ids a full pass read (in index order): the list the next
    /// passes start from. A full pass whose read failed gives none, and the next pass is
    /// full again.
    pub fn looked_at(&mut self, ids: &[Uuid]) {
        self.last = Some(ids.to_vec());
    }

    /// Whether this pass leaves sweep `id` out: it waited, and nothing that decides it
    /// changed since.
    pub fn skips(&self, id: &Uuid) -> bool {
        self.waiting.contains(id)
    }

    /// Records that this pass found sweep `id` waiting below the threshold or for a price.
    pub fn waits(&mut self, id: Uuid) {
        self.waiting.insert(id);
    }

    /// Records that sweep `id` belongs to another sender (another chain, or a project this
    /// worker does not serve): left out like a waiting one, until its row is written again
    /// or the next full pass.
    pub fn passes_over(&mut self, id: Uuid) {
        self.waiting.insert(id);
    }

    /// How many sweeps are remembered as waiting.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether no sweep is remembered as waiting.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_waiting_sweep_is_left_out_until_its_row_is_written_again() {
        let changes = Arc::new(SweepChanges::default());
        let hook = changes.hook();
        let [a, b, c, d] = [(); 4].map(|_| Uuid::now_v7());
        let t0 = Instant::now();
        let mut w = WaitingSweeps::default();
        assert_eq!(
            w.begin_pass(&changes, 0, t0),
            None,
            "the first pass is full"
        );
        w.looked_at(&sorted(vec![a, b, c]));
        w.waits(a);
        w.waits(b);
        // `c` did not wait (submitted, or not reached by the pass): looked at again.
        let next = w.begin_pass(&changes, 0, t0 + Duration::from_secs(1));
        assert_eq!(next, Some(vec![c]));
        assert!(w.skips(&a) && w.skips(&b));
        // A write of `a` (a credit added to it, or a request) brings it back, a new sweep
        // `d` comes in through its first write; a row of another kind changes nothing.
        hook(&[touched_sweep(a)]);
        hook(&[touched_sweep(d)]);
        hook(&[Touched {
            kind: std::any::TypeId::of::<appliance_storage::records::Wallet>(),
            ..touched_sweep(b)
        }]);
        let next = w.begin_pass(&changes, 0, t0 + Duration::from_secs(2));
        assert_eq!(next, Some(sorted(vec![a, c, d])), "in work-index order");
        assert!(!w.skips(&a), "written since: read again");
        assert!(w.skips(&b));
        assert_eq!(w.len(), 1);
        // Written twice, listed once; the list carries over from pass to pass.
        hook(&[touched_sweep(c)]);
        hook(&[touched_sweep(c)]);
        w.waits(d);
        let next = w.begin_pass(&changes, 0, t0 + Duration::from_secs(3));
        assert_eq!(next, Some(sorted(vec![a, c])));
    }

    #[test]
    fn prices_time_and_a_lost_change_make_a_full_pass() {
        let changes = Arc::new(SweepChanges::default());
        let hook = changes.hook();
        let a = Uuid::now_v7();
        let t0 = Instant::now();
        let mut w = WaitingSweeps::default();
        assert_eq!(w.begin_pass(&changes, 7, t0), None);
        w.looked_at(&[a]);
        w.waits(a);
        // A price stored since.
        assert_eq!(w.begin_pass(&changes, 8, t0), None);
        assert!(w.is_empty());
        w.looked_at(&[a]);
        w.waits(a);
        let before = t0 + FULL_PASS_EVERY - Duration::from_millis(1);
        assert_eq!(w.begin_pass(&changes, 8, before), Some(vec![]));
        assert!(w.skips(&a));
        assert_eq!(w.begin_pass(&changes, 8, t0 + FULL_PASS_EVERY), None);
        assert!(w.is_empty(), "a full pass at least every FULL_PASS_EVERY");
        // A full pass whose read of the work index failed gave no list: the next is full.
        let t1 = t0 + FULL_PASS_EVERY;
        assert_eq!(w.begin_pass(&changes, 8, t1), None);
        w.looked_at(&[a]);
        // More writes than the log keeps, none of them `a`'s: `a`'s own write may have
        // been among those dropped, so everything is read again.
        w.waits(a);
        for _ in 0..=SweepChanges::CAPACITY {
            hook(&[touched_sweep(Uuid::now_v7())]);
        }
        assert_eq!(w.begin_pass(&changes, 8, t1 + Duration::from_secs(1)), None);
        assert!(
            w.is_empty(),
            "the log dropped changes this sender had not read"
        );
        // From the new position, the log is read again.
        w.looked_at(&[a]);
        w.waits(a);
        let e = Uuid::now_v7();
        hook(&[touched_sweep(e)]);
        let next = w.begin_pass(&changes, 8, t1 + Duration::from_secs(2));
        assert_eq!(next, Some(vec![e]));
        assert!(w.skips(&a));
    }

    #[test]
    fn the_log_keeps_the_newest_entries_at_their_positions() {
        let c = SweepChanges::default();
        let ids: Vec<Uuid> = (0..5).map(|_| Uuid::now_v7()).collect();
        {
            let mut log = c.log.lock().unwrap();
            for id in &ids {
                log.push(*id);
            }
        }
        assert_eq!(c.position(), 5);
        assert_eq!(c.since(2), Some((ids[2..].to_vec(), 5)));
        assert_eq!(c.since(5), Some((vec![], 5)));
        assert_eq!(c.since(6), None);
    }
}
