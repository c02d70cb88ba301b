//! An exact in-memory cache of checkout documents: no store transaction per request where a
//! cache is exact.
//!
//! `GET /v1/checkout/{token}` is public and polled by every buyer's page (10,000 buyers
//! polling every 3 s is 3,300 requests/s). Without the cache each answer reads four tables in
//! a store read transaction on the blocking pool and renders the whole document (a map per
//! field, one option per accepted chain and coin). The document is a function of stored rows: the
//! invoice, its project (merchant name and logo), the project's test clock, the deposits
//! paying the invoice and the refund claims' payouts, plus the registry (fixed for the process)
//! and the clock (`now`). This cache keeps, per invoice, what [`checkout::load`] read and the
//! rendered document split around `now`, so a hit is a map lookup and a copy.
//!
//! # Exactness
//!
//! Every change to those rows reaches [`CheckoutCache::invalidate`] through the store's
//! commit hook ([`appliance_storage::Store::on_commit`]), which the writer thread runs after
//! the commit and before any request of the batch hears back: an invoice row (by id), a
//! deposit (by the invoice it pays, [`appliance_storage::records::Row::parent_id`], before
//! and after the write), a payout (the invoice one of whose refunds it is), a project row or test
//! clock (every document of the project: by generation, [`Inner::pgen`]). So once a write
//! is answered, no request is served the document from before it.
//!
//! A fill races with commits: a read snapshot taken before a commit may finish after the
//! commit's invalidation. A fill therefore stores its result only if nothing it depends on
//! was invalidated since before its snapshot began: by invoice id, a `Filling` ticket set
//! before the read that any invalidation of the invoice removes; by token (the invoice id
//! not known yet), the global invoice epoch unchanged; and in both cases the project epoch
//! unchanged, and for a document with refund payouts the payout epoch unchanged. A fill
//! that loses the race still answers from its own snapshot (a consistent read, as before)
//! but caches nothing.
//!
//! Misses (unknown tokens) are not cached: each reads the store, as before. The rate
//! limits are not here: every request is still charged to its token
//! (`api::checkout::charge`).
//!
//! Memory: documents are dropped (arbitrary ones) once their estimated size passes
//! [`CheckoutCache::new`]'s budget; a token map of at most [`MAX_TOKENS`] entries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use appliance_storage::records::{Deposit, Invoice, Payout, Project};
use appliance_storage::{CommitHook, Store, StoreError, Touched};

use crate::registry::Registry;
use crate::services::checkout::{self, Loaded};
use crate::views::ts;

/// Most token -> invoice entries kept (a token never moves to another invoice; past the
/// cap the map is emptied and refilled from the store).
pub const MAX_TOKENS: usize = 200_000;
/// Most refund payouts tracked; past it, every cached document is dropped.
const MAX_PAYOUTS: usize = 100_000;
/// Default budget of cached documents, bytes (estimated: a document with ~26 quotes counts
/// about 20 KB). 256 MiB holds about 13,000 documents, so 10,000 buyers polling at once
/// stay cached; at 64 MiB (about 3,300) a round of polls over more tokens than fit evicts
/// each document before its next poll.
pub const DEFAULT_BUDGET_BYTES: usize = 256 << 20;

/// What one token opens, as of its last change: the rows read and the rendered document.
pub struct Cached {
    /// What [`checkout::load`] read (`now_us` as of the read; use [`Cached::now_us`]).
    pub loaded: Loaded,
    /// The project's test clock offset, µs (0 for live projects).
    offset_us: i64,
    /// The document's JSON up to and including `"now":"`.
    head: String,
    /// The document's JSON from the closing quote of `now`.
    tail: String,
    /// The project's generation when filled ([`Inner::pgen`]).
    pstamp: u64,
}

impl std::ops::Deref for Cached {
    type Target = Loaded;
    fn deref(&self) -> &Loaded {
        &self.loaded
    }
}

impl Cached {
    /// Renders the document of `l` once, split around its `now` value.
    fn render(reg: &Registry, loaded: Loaded, offset_us: i64) -> Cached {
        const MARK: &str = "\u{1}now\u{1}";
        let mut doc = checkout::document(reg, &loaded);
        doc["now"] = serde_json::Value::String(MARK.into());
        let text = serde_json::to_string(&doc).expect("json");
        // Control characters are escaped in JSON strings, and the key is the document's
        // own (a top-level key; nested objects have no `now`), so this occurs once.
        let needle = "\"now\":\"\\u0001now\\u0001\"";
        let (head, tail) = match text.find(needle) {
            Some(at) => (
                text[..at + "\"now\":\"".len()].to_string(),
                text[at + needle.len() - 1..].to_string(),
            ),
            // Unreachable; keeps the document whole without `now` if it ever were.
            None => (text, String::new()),
        };
        Cached {
            loaded,
            offset_us,
            head,
            tail,
            pstamp: 0,
        }
    }

    /// The project's clock at wall-clock time `real_now_us` (test projects follow the test
    /// clock), Unix µs.
    pub fn now_us(&self, real_now_us: i64) -> i64 {
        real_now_us.saturating_add(self.offset_us)
    }

    /// The document's JSON with `now` at `project_now_us`: the same bytes as
    /// `serde_json::to_string(&checkout::document(reg, l))` with that `now`.
    pub fn body(&self, project_now_us: i64) -> String {
        if self.tail.is_empty() {
            return self.head.clone();
        }
        let now = ts(project_now_us);
        let mut s = String::with_capacity(self.head.len() + now.len() + self.tail.len());
        s.push_str(&self.head);
        s.push_str(&now);
        s.push_str(&self.tail);
        s
    }

    fn size(&self) -> usize {
        // The rendered halves plus the rows (about the same again: quotes and addresses).
        2 * (self.head.len() + self.tail.len()) + 512
    }
}

enum Slot {
    /// A fill by id is reading; the ticket tells it whether it may store its result.
    Filling(u64),
    Ready(Arc<Cached>),
}

#[derive(Default)]
struct Inner {
    tokens: HashMap<String, Uuid>,
    docs: HashMap<Uuid, Slot>,
    /// Refund payout -> its invoice, for the documents cached with one.
    payouts: HashMap<Uuid, Uuid>,
    /// Project -> generation, raised by every change to the project row or its test clock;
    /// a document is valid only with its project's current generation (absent: 0).
    pgen: HashMap<Uuid, u64>,
    next_ticket: u64,
    /// Raised by every invalidation of an invoice's document (cached or not).
    inv_epoch: u64,
    /// Raised by every project change.
    proj_epoch: u64,
    /// Raised by every payout change.
    payout_epoch: u64,
    bytes: usize,
}

impl Inner {
    fn ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket
    }

    fn pgen(&self, project: Uuid) -> u64 {
        self.pgen.get(&project).copied().unwrap_or(0)
    }

    fn drop_doc(&mut self, id: Uuid) {
        self.inv_epoch += 1;
        if let Some(Slot::Ready(c)) = self.docs.remove(&id) {
            self.bytes = self.bytes.saturating_sub(c.size());
        }
    }

    fn clear_docs(&mut self) {
        self.docs.clear();
        self.payouts.clear();
        self.bytes = 0;
    }
}

/// How a fill may store its result (see the module's "Exactness").
#[derive(Clone, Copy)]
struct Guard {
    by_id: Option<(Uuid, u64)>,
    inv_epoch: u64,
    proj_epoch: u64,
    payout_epoch: u64,
}

/// The cache; one per server, its [`CheckoutCache::hook`] registered on the store.
pub struct CheckoutCache {
    inner: Mutex<Inner>,
    budget_bytes: usize,
}

impl CheckoutCache {
    /// A cache holding documents up to about `budget_bytes`.
    pub fn new(budget_bytes: usize) -> Self {
        CheckoutCache {
            inner: Mutex::new(Inner::default()),
            budget_bytes,
        }
    }

    /// The store commit hook that keeps this cache exact.
    pub fn hook(self: &Arc<Self>) -> CommitHook {
        let me = Arc::clone(self);
        Arc::new(move |touched: &[Touched]| me.invalidate(touched))
    }

    /// Drops what `touched` (rows of a committed batch) changes.
    pub fn invalidate(&self, touched: &[Touched]) {
        let relevant = |t: &Touched| {
            t.is::<Invoice>()
                || (t.is::<Deposit>() && (t.parent.is_some() || t.old_parent.is_some()))
                || t.is::<Payout>()
                || t.is::<Project>()
                || t.is_test_clock()
        };
        if !touched.iter().any(relevant) {
            return;
        }
        let mut g = self.inner.lock().expect("checkout cache lock");
        for t in touched {
            if t.is::<Invoice>() {
                g.drop_doc(t.id);
            } else if t.is::<Deposit>() {
                for inv in [t.parent, t.old_parent].into_iter().flatten() {
                    g.drop_doc(inv);
                }
            } else if t.is::<Payout>() {
                g.payout_epoch += 1;
                if let Some(inv) = g.payouts.remove(&t.id) {
                    g.drop_doc(inv);
                }
            } else if t.is::<Project>() || t.is_test_clock() {
                let gen = g.ticket();
                g.pgen.insert(t.id, gen);
                g.proj_epoch += 1;
            }
        }
    }

    /// What `token` opens (`None` for every miss), from the cache or from one read of the
    /// store (run on the calling thread: a bounded read, `Store::read_now`).
    /// `real_now_us` is the wall clock.
    pub fn open(
        &self,
        store: &Store,
        reg: &Registry,
        token: &str,
        real_now_us: i64,
    ) -> Result<Option<Arc<Cached>>, StoreError> {
        let guard = {
            let mut g = self.inner.lock().expect("checkout cache lock");
            let by_id = match g.tokens.get(token).copied() {
                Some(id) => {
                    if let Some(Slot::Ready(c)) = g.docs.get(&id) {
                        if g.pgen(c.loaded.project.id) == c.pstamp {
                            return Ok(Some(Arc::clone(c)));
                        }
                    }
                    let t = g.ticket();
                    if let Some(Slot::Ready(old)) = g.docs.insert(id, Slot::Filling(t)) {
                        g.bytes = g.bytes.saturating_sub(old.size());
                    }
                    Some((id, t))
                }
                None => None,
            };
            Guard {
                by_id,
                inv_epoch: g.inv_epoch,
                proj_epoch: g.proj_epoch,
                payout_epoch: g.payout_epoch,
            }
        };
        let read = store.read_now(|r| {
            let loaded = match guard.by_id {
                Some((id, _)) => checkout::load_id(r, id.into(), real_now_us)?,
                None => checkout::load(r, token, real_now_us)?,
            };
            Ok(loaded.map(|l| {
                let offset = l.now_us.saturating_sub(real_now_us);
                (l, offset)
            }))
        });
        let (loaded, offset) = match read {
            Ok(Some(v)) => v,
            other => {
                if let Some((id, t)) = guard.by_id {
                    let mut g = self.inner.lock().expect("checkout cache lock");
                    if matches!(g.docs.get(&id), Some(Slot::Filling(x)) if *x == t) {
                        g.docs.remove(&id);
                    }
                }
                return other.map(|_| None);
            }
        };
        let mut cached = Cached::render(reg, loaded, offset);
        let id = cached.loaded.invoice.id;
        let refund_payouts: Vec<Uuid> = cached.loaded.refund_payouts.iter().map(|p| p.id).collect();
        let mut g = self.inner.lock().expect("checkout cache lock");
        let fresh = g.proj_epoch == guard.proj_epoch
            && (refund_payouts.is_empty() || g.payout_epoch == guard.payout_epoch)
            && match guard.by_id {
                Some((_, t)) => matches!(g.docs.get(&id), Some(Slot::Filling(x)) if *x == t),
                None => g.inv_epoch == guard.inv_epoch,
            };
        if guard.by_id.is_none() {
            if g.tokens.len() >= MAX_TOKENS {
                g.tokens.clear();
            }
            g.tokens.insert(token.to_string(), id);
        }
        if !fresh {
            if let Some((_, t)) = guard.by_id {
                if matches!(g.docs.get(&id), Some(Slot::Filling(x)) if *x == t) {
                    g.docs.remove(&id);
                }
            }
            return Ok(Some(Arc::new(cached)));
        }
        cached.pstamp = g.pgen(cached.loaded.project.id);
        let cached = Arc::new(cached);
        for p in refund_payouts {
            if g.payouts.len() >= MAX_PAYOUTS {
                g.clear_docs();
            }
            g.payouts.insert(p, id);
        }
        g.bytes += cached.size();
        if let Some(Slot::Ready(old)) = g.docs.insert(id, Slot::Ready(Arc::clone(&cached))) {
            g.bytes = g.bytes.saturating_sub(old.size());
        }
        if g.bytes > self.budget_bytes {
            self.evict(&mut g, id);
        }
        Ok(Some(cached))
    }

    /// Drops documents other than `keep` until the cache is at 3/4 of its budget.
    fn evict(&self, g: &mut Inner, keep: Uuid) {
        let target = self.budget_bytes / 4 * 3;
        let victims: Vec<Uuid> = {
            let mut acc = g.bytes;
            g.docs
                .iter()
                .filter_map(|(id, s)| match s {
                    Slot::Ready(c) if *id != keep && acc > target => {
                        acc = acc.saturating_sub(c.size());
                        Some(*id)
                    }
                    _ => None,
                })
                .collect()
        };
        for id in victims {
            if let Some(Slot::Ready(c)) = g.docs.remove(&id) {
                g.bytes = g.bytes.saturating_sub(c.size());
            }
        }
    }
}
