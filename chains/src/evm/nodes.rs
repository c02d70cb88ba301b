//! Which of a chain's nodes to ask (DECISIONS.md section 16: `rpc_urls`, failover in
//! order).
//!
//! The rules, kept here as plain state so they are unit-tested without a node:
//! * Nodes are preferred in configuration order.
//! * A node whose call failed in transport or timed out is *down*: skipped for
//!   [`DOWN_FOR`], then probed again (a head probe, [`NodeChoice::to_probe`]); only an
//!   answer brings it back. A node that answers with another chain id is down for
//!   [`WRONG_CHAIN_FOR`]: it is never asked for blocks of the wrong chain.
//! * A node whose head is more than [`MAX_LAG_BLOCKS`] behind the best head of the nodes that
//!   answered is *lagging*: skipped while an up-to-date node answers.
//! * With no usable node the call still goes somewhere: lagging nodes, then down ones, in
//!   configuration order (the call fails or succeeds on its own).
//!
//! Every change of the skipped set is logged once ([`NodeChoice::changes`]) and summed up
//! in one sentence for the chain's `status_note` ([`NodeChoice::note`]). Nodes are named by
//! their redacted URL only ([`crate::redact::redact_url`]).

use std::time::{Duration, Instant};

/// How many blocks a node may be behind the best node before it is skipped ("lags the
/// others by more than a few blocks": DECISIONS.md section 16). Two healthy nodes of a
/// chain with quarter-second blocks differ by a block or two at any instant.
pub const MAX_LAG_BLOCKS: u64 = 5;
/// How long a node that failed is skipped before it is probed again.
pub const DOWN_FOR: Duration = Duration::from_secs(10);
/// How long a node that reported another chain id is skipped before it is asked again.
pub const WRONG_CHAIN_FOR: Duration = Duration::from_secs(300);

/// Why a node is skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// Its calls fail (transport error, timeout); the detail goes to the log only.
    Down { detail: String },
    /// It answers with another chain's id.
    WrongChain { got: u64, expected: u64 },
    /// Its head is this many blocks behind the best node's.
    Lagging { behind: u64 },
}

impl Skip {
    /// A few words for the `status_note` (no error chain, no URL).
    fn short(&self) -> String {
        match self {
            Skip::Down { .. } => "not answering".into(),
            Skip::WrongChain { got, .. } => format!("reports chain id {got}"),
            Skip::Lagging { behind } => format!("{behind} blocks behind"),
        }
    }

    fn same_kind(&self, o: &Skip) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(o)
    }
}

#[derive(Debug, Clone)]
struct Node {
    shown: String,
    /// Head at the last probe round that reached it.
    head: Option<u64>,
    /// Down (or wrong chain) until the instant, with why.
    down: Option<(Instant, Skip)>,
}

/// A change of a node's standing, to be logged once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Skipped { node: String, why: Skip },
    Restored { node: String },
}

/// The state of a chain's nodes and the choice rules (see the module doc).
#[derive(Debug, Clone)]
pub struct NodeChoice {
    nodes: Vec<Node>,
    /// Skipped set as last reported by [`NodeChoice::changes`].
    reported: Vec<Option<Skip>>,
}

impl NodeChoice {
    /// Nodes named by their redacted URLs, in configuration order.
    pub fn new(shown: Vec<String>) -> NodeChoice {
        let n = shown.len();
        NodeChoice {
            nodes: shown
                .into_iter()
                .map(|shown| Node {
                    shown,
                    head: None,
                    down: None,
                })
                .collect(),
            reported: vec![None; n],
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Best head among nodes that are not down.
    fn best_head(&self) -> Option<u64> {
        self.nodes
            .iter()
            .filter(|n| n.down.is_none())
            .filter_map(|n| n.head)
            .max()
    }

    /// Node `i`'s head at the last probe that reached it.
    pub fn head(&self, i: usize) -> Option<u64> {
        self.nodes[i].head
    }

    /// Why node `i` is skipped now, if it is.
    pub fn skip(&self, i: usize) -> Option<Skip> {
        let n = &self.nodes[i];
        if let Some((_, why)) = &n.down {
            return Some(why.clone());
        }
        let best = self.best_head()?;
        let head = n.head?;
        let behind = best.saturating_sub(head);
        (behind > MAX_LAG_BLOCKS).then_some(Skip::Lagging { behind })
    }

    /// The order to try nodes in for one call: usable nodes in configuration order, then
    /// lagging ones, then down ones.
    pub fn order(&self) -> Vec<usize> {
        let mut usable = Vec::new();
        let mut lagging = Vec::new();
        let mut down = Vec::new();
        for i in 0..self.nodes.len() {
            match self.skip(i) {
                None => usable.push(i),
                Some(Skip::Lagging { .. }) => lagging.push(i),
                Some(_) => down.push(i),
            }
        }
        usable.extend(lagging);
        usable.extend(down);
        usable
    }

    /// The node a call goes to first.
    pub fn preferred(&self) -> usize {
        self.order().first().copied().unwrap_or(0)
    }

    /// Nodes a head probe asks: every node that is not down, and down ones whose time is up.
    pub fn to_probe(&self, now: Instant) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| match &self.nodes[i].down {
                None => true,
                Some((until, _)) => *until <= now,
            })
            .collect()
    }

    /// Node `i` answered (its head, when the call was a head probe).
    pub fn answered(&mut self, i: usize, head: Option<u64>) {
        let n = &mut self.nodes[i];
        n.down = None;
        if head.is_some() {
            n.head = head;
        }
    }

    /// Node `i` failed in transport or timed out.
    pub fn failed(&mut self, i: usize, detail: String, now: Instant) {
        let n = &mut self.nodes[i];
        n.head = None;
        n.down = Some((now + DOWN_FOR, Skip::Down { detail }));
    }

    /// Node `i` answered with chain id `got` instead of `expected`.
    pub fn wrong_chain(&mut self, i: usize, got: u64, expected: u64, now: Instant) {
        let n = &mut self.nodes[i];
        n.head = None;
        n.down = Some((now + WRONG_CHAIN_FOR, Skip::WrongChain { got, expected }));
    }

    /// Changes of the skipped set since the last call (for one log line each). A node that
    /// stays skipped for the same kind of reason is not reported again.
    pub fn changes(&mut self) -> Vec<Change> {
        let mut out = Vec::new();
        for i in 0..self.nodes.len() {
            let now = self.skip(i);
            let before = &self.reported[i];
            match (before, &now) {
                (None, Some(why)) => out.push(Change::Skipped {
                    node: self.nodes[i].shown.clone(),
                    why: why.clone(),
                }),
                (Some(b), Some(why)) if !b.same_kind(why) => out.push(Change::Skipped {
                    node: self.nodes[i].shown.clone(),
                    why: why.clone(),
                }),
                (Some(_), None) => out.push(Change::Restored {
                    node: self.nodes[i].shown.clone(),
                }),
                _ => {}
            }
            self.reported[i] = now;
        }
        out
    }

    /// One sentence for the chain's `status_note` while some node is skipped and another
    /// serves; `None` when every node is usable (or none is: the failing calls speak then).
    pub fn note(&self) -> Option<String> {
        let skipped: Vec<(usize, Skip)> = (0..self.nodes.len())
            .filter_map(|i| self.skip(i).map(|s| (i, s)))
            .collect();
        if skipped.is_empty() || skipped.len() == self.nodes.len() {
            return None;
        }
        let using = &self.nodes[self.preferred()].shown;
        let list: Vec<String> = skipped
            .iter()
            .map(|(i, s)| format!("{} ({})", self.nodes[*i].shown, s.short()))
            .collect();
        let (noun, verb) = if list.len() == 1 {
            ("Node", "is")
        } else {
            ("Nodes", "are")
        };
        Some(format!(
            "{noun} {} {verb} skipped; using {using}.",
            list.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> NodeChoice {
        NodeChoice::new(vec![
            "http://a".into(),
            "http://b".into(),
            "http://c".into(),
        ])
    }

    #[test]
    fn configuration_order_is_preferred_while_all_answer() {
        let mut c = three();
        assert_eq!(c.order(), vec![0, 1, 2]);
        for (i, h) in [(0, 100), (1, 101), (2, 99)] {
            c.answered(i, Some(h));
        }
        assert_eq!(c.preferred(), 0);
        assert!(c.note().is_none());
        assert!(c.changes().is_empty());
    }

    #[test]
    fn a_failing_node_is_skipped_then_probed_again_and_restored() {
        let mut c = three();
        let t0 = Instant::now();
        c.failed(0, "connection refused".into(), t0);
        assert_eq!(c.order(), vec![1, 2, 0]);
        assert_eq!(c.preferred(), 1);
        assert_eq!(
            c.note().as_deref(),
            Some("Node http://a (not answering) is skipped; using http://b.")
        );
        let ch = c.changes();
        assert!(
            matches!(&ch[..], [Change::Skipped { node, why: Skip::Down { .. } }] if node == "http://a")
        );
        assert!(c.changes().is_empty(), "reported once");
        // Not probed before its time is up; probed after.
        assert_eq!(c.to_probe(t0), vec![1, 2]);
        assert_eq!(c.to_probe(t0 + DOWN_FOR), vec![0, 1, 2]);
        // Failing again keeps it skipped without a second report.
        c.failed(0, "timeout".into(), t0 + DOWN_FOR);
        assert!(c.changes().is_empty());
        c.answered(0, Some(7));
        assert_eq!(c.preferred(), 0);
        assert_eq!(
            c.changes(),
            vec![Change::Restored {
                node: "http://a".into()
            }]
        );
        assert!(c.note().is_none());
    }

    #[test]
    fn a_node_more_than_a_few_blocks_behind_is_skipped() {
        let mut c = three();
        c.answered(0, Some(100));
        c.answered(1, Some(100 + MAX_LAG_BLOCKS));
        c.answered(2, Some(100 + MAX_LAG_BLOCKS));
        // Exactly MAX_LAG_BLOCKS behind: still used.
        assert_eq!(c.preferred(), 0);
        c.answered(1, Some(101 + MAX_LAG_BLOCKS));
        assert_eq!(
            c.skip(0),
            Some(Skip::Lagging {
                behind: MAX_LAG_BLOCKS + 1
            })
        );
        assert_eq!(c.order(), vec![1, 2, 0]);
        assert_eq!(
            c.note().as_deref(),
            Some("Node http://a (6 blocks behind) is skipped; using http://b.")
        );
        // It catches up: preferred again.
        c.answered(0, Some(101 + MAX_LAG_BLOCKS));
        assert_eq!(c.preferred(), 0);
    }

    #[test]
    fn a_down_node_does_not_count_as_the_best_head() {
        let mut c = three();
        c.answered(0, Some(100));
        c.answered(1, Some(500));
        c.failed(1, "gone".into(), Instant::now());
        // Node 1's old head no longer makes node 0 look behind.
        assert_eq!(c.skip(0), None);
        assert_eq!(c.preferred(), 0);
    }

    #[test]
    fn a_node_of_another_chain_is_skipped_for_long() {
        let mut c = three();
        let t0 = Instant::now();
        c.wrong_chain(0, 5, 1, t0);
        assert_eq!(c.preferred(), 1);
        assert_eq!(c.to_probe(t0 + DOWN_FOR), vec![1, 2]);
        assert_eq!(c.to_probe(t0 + WRONG_CHAIN_FOR), vec![0, 1, 2]);
        assert!(c.note().unwrap().contains("reports chain id 5"));
    }

    #[test]
    fn with_every_node_skipped_the_call_still_goes_somewhere() {
        let mut c = three();
        let t0 = Instant::now();
        c.answered(2, Some(100));
        c.answered(1, Some(10));
        c.failed(0, "x".into(), t0);
        // Node 1 lags, node 0 is down: node 2 first, then the lagging one, then the down one.
        assert_eq!(c.order(), vec![2, 1, 0]);
        c.failed(2, "x".into(), t0);
        // Node 1 is now the best head left: usable.
        assert_eq!(c.order(), vec![1, 0, 2]);
        c.failed(1, "x".into(), t0);
        assert_eq!(c.order(), vec![0, 1, 2]);
        assert!(c.note().is_none(), "all down: the failing calls speak");
    }

    #[test]
    fn several_skipped_nodes_make_one_sentence() {
        let mut c = three();
        let t0 = Instant::now();
        c.failed(0, "x".into(), t0);
        c.answered(1, Some(1));
        c.answered(2, Some(100));
        assert_eq!(
            c.note().as_deref(),
            Some("Nodes http://a (not answering), http://b (99 blocks behind) are skipped; using http://c.")
        );
    }
}
