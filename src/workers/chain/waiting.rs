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
}

impl WaitingSweeps {
    /// Starts a pass at `now` with the market's price generation `prices`: forgets the
    /// sweeps written since the last pass, or all of them (a full pass) when prices moved,
    /// the log no longer holds every change, or [`FULL_PASS_EVERY`] has passed. Call it
    /// before the pass reads the store, so that a write it does not see is in the next
    /// pass's changes.
    pub fn begin_pass(&mut self, changes: &SweepChanges, prices: u64, now: Instant) {
        let due = self
            .full_at
            .is_none_or(|t| now.saturating_duration_since(t) >= FULL_PASS_EVERY);
        let read = (!due && prices == self.prices)
            .then(|| changes.since(self.position))
            .flatten();
        match read {
            Some((ids, end)) => {
                for id in ids {
                    self.waiting.remove(&id);
                }
                self.position = end;
            }
            None => {
                self.waiting.clear();
                self.position = changes.position();
                self.prices = prices;
                self.full_at = Some(now);
            }
        }
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

    #[test]
    fn a_waiting_sweep_is_left_out_until_its_row_is_written_again() {
        let changes = Arc::new(SweepChanges::default());
        let hook = changes.hook();
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        let t0 = Instant::now();
        let mut w = WaitingSweeps::default();
        w.begin_pass(&changes, 0, t0);
        w.waits(a);
        w.waits(b);
        w.begin_pass(&changes, 0, t0 + Duration::from_secs(1));
        assert!(w.skips(&a) && w.skips(&b));
        // A write of `a` (a credit added to it, or a request) brings it back; a row of
        // another kind changes nothing.
        hook(&[touched_sweep(a)]);
        hook(&[Touched {
            kind: std::any::TypeId::of::<appliance_storage::records::Wallet>(),
            ..touched_sweep(b)
        }]);
        w.begin_pass(&changes, 0, t0 + Duration::from_secs(2));
        assert!(!w.skips(&a), "written since: read again");
        assert!(w.skips(&b));
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn prices_time_and_a_lost_change_make_a_full_pass() {
        let changes = Arc::new(SweepChanges::default());
        let hook = changes.hook();
        let a = Uuid::now_v7();
        let t0 = Instant::now();
        let mut w = WaitingSweeps::default();
        w.begin_pass(&changes, 7, t0);
        w.waits(a);
        // A price stored since.
        w.begin_pass(&changes, 8, t0);
        assert!(w.is_empty());
        w.waits(a);
        w.begin_pass(&changes, 8, t0 + FULL_PASS_EVERY - Duration::from_millis(1));
        assert!(w.skips(&a));
        w.begin_pass(&changes, 8, t0 + FULL_PASS_EVERY);
        assert!(w.is_empty(), "a full pass at least every FULL_PASS_EVERY");
        // More writes than the log keeps, none of them `a`'s: `a`'s own write may have
        // been among those dropped, so everything is read again.
        w.waits(a);
        let t1 = t0 + FULL_PASS_EVERY;
        for _ in 0..=SweepChanges::CAPACITY {
            hook(&[touched_sweep(Uuid::now_v7())]);
        }
        w.begin_pass(&changes, 8, t1 + Duration::from_secs(1));
        assert!(
            w.is_empty(),
            "the log dropped changes this sender had not read"
        );
        // From the new position, the log is read again.
        w.waits(a);
        hook(&[touched_sweep(Uuid::now_v7())]);
        w.begin_pass(&changes, 8, t1 + Duration::from_secs(2));
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
