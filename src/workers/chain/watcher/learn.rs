//! How a watcher learns the deposit addresses it looks for: page by page over the wallet
//! rows created since it last looked (wallet ids only grow).

use super::*;

impl Learnt {
    /// [`Learnt::refresh`], logging how many addresses it learnt and in how long.
    pub(super) async fn refresh_logged(
        &mut self,
        state: &Handles,
        w: &ChainWorker,
    ) -> anyhow::Result<()> {
        let (known, started) = (self.set.len(), std::time::Instant::now());
        self.refresh(state, w).await?;
        if self.set.len() > known {
            tracing::debug!(
                chain = w.chain,
                added = self.set.len() - known,
                watched = self.set.len(),
                ms = started.elapsed().as_millis() as u64,
                "learnt deposit addresses"
            );
        }
        Ok(())
    }

    /// The transfers of a scan to a learnt address, with their wallets.
    pub(super) fn keep(&self, transfers: Vec<Transfer>) -> Vec<(Transfer, Uuid)> {
        transfers
            .into_iter()
            .filter_map(|t| self.set.wallet(&t.to).map(|id| (t, id)))
            .collect()
    }

    /// Reads the wallets created since the last refresh and adds the addresses of those on
    /// the worker's chain and scope. Pages of [`WALLET_PAGE`] rows are read and sorted out
    /// on the blocking pool ([`wallet_page`]), the next page while this task adds the
    /// previous one's addresses (at start, 100,000 wallets in the catch-up benchmark).
    pub(super) async fn refresh(&mut self, state: &Handles, w: &ChainWorker) -> anyhow::Result<()> {
        if self.set.tokens.is_empty() && !w.tokens.is_empty() {
            self.set.tokens = w.tokens.iter().map(|(a, _)| *a).collect();
        }
        let fetch = |after: Option<Uuid>, known: BTreeMap<Uuid, bool>| {
            let (store, chain, scope) = (state.store.clone(), w.chain, w.scope);
            tokio::spawn(async move {
                store
                    .read(move |r| wallet_page(r, chain, scope, after, known))
                    .await
            })
        };
        let mut next = fetch(self.last, self.projects.clone());
        loop {
            let page = next
                .await
                .map_err(|e| anyhow!("reading the deposit addresses: {e}"))??;
            let full = page.read == WALLET_PAGE;
            self.projects.extend(page.modes);
            if page.last.is_some() {
                self.last = page.last;
            }
            if !full {
                self.set.extend(page.addresses);
                return Ok(());
            }
            next = fetch(page.last, self.projects.clone());
            self.set.extend(page.addresses);
        }
    }
}

/// One page of wallet rows as the watcher learns them ([`Learnt::refresh`]).
struct WalletPage {
    /// Rows read (a full page: there may be more).
    read: usize,
    /// The last row's id.
    last: Option<Uuid>,
    /// Deposit addresses on the worker's chain, of projects in its scope, with their
    /// wallet ids.
    addresses: Vec<(Address, Uuid)>,
    /// Whether each project first seen in this page is in the worker's scope.
    modes: BTreeMap<Uuid, bool>,
}

/// Reads up to [`WALLET_PAGE`] wallets after `after` and keeps the addresses a watcher of
/// `chain` and `scope` looks for; `known`: the scope's verdict on projects seen before.
fn wallet_page(
    r: &(impl ReadOps + ScanOps),
    chain: &str,
    scope: WorkScope,
    after: Option<Uuid>,
    known: BTreeMap<Uuid, bool>,
) -> Result<WalletPage, appliance_storage::StoreError> {
    let rows = r.after::<Wallet>(after, WALLET_PAGE)?;
    let mut verdicts = known;
    let mut modes = BTreeMap::new();
    let mut addresses = Vec::new();
    for x in &rows {
        let ok = match verdicts.get(&x.project_id) {
            Some(ok) => *ok,
            None => {
                let ok = scope.may_admit(x.project_id)
                    && r.get::<Project>(x.project_id)?
                        .is_some_and(|p| scope.admits(&p));
                verdicts.insert(x.project_id, ok);
                modes.insert(x.project_id, ok);
                ok
            }
        };
        if !ok || x.chain != chain {
            continue;
        }
        let Ok(a) = x.address.parse::<Address>() else {
            continue;
        };
        addresses.push((a, x.id));
    }
    Ok(WalletPage {
        read: rows.len(),
        last: rows.last().map(|x| x.id),
        addresses,
        modes,
    })
}
