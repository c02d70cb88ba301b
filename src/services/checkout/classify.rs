//! Classifying refund claims when the buyer opens the page: the sender class and the
//! network fee of each claim waiting for them, read through the chain's client
//! ([`super::classify`]), stored by [`super::apply_classification`].

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use appliance_chains::client::ChainClient;
use appliance_storage::records::Mode;
use appliance_storage::Store;

use crate::market::Market;
use crate::registry::Registry;
use crate::services::reads;
use crate::services::sim_chain::SimChains;
use crate::services::types::InvoiceId;

use super::Loaded;

/// What classification reads and writes through, and the invoices being classified now
/// (one classification per invoice at a time; a second request skips it).
pub struct RefundClassifier<'a> {
    pub store: &'a Store,
    pub reg: &'a Arc<Registry>,
    pub market: &'a Arc<Market>,
    pub sim: &'a SimChains,
    pub busy: &'a Mutex<HashSet<Uuid>>,
}

impl RefundClassifier<'_> {
    /// Classifies the refund claims of `l` that wait for it, one claim after another. A
    /// failure leaves the claim unclassified (`refund_not_ready`) for a later request; it
    /// is logged, not answered.
    pub async fn run(&self, l: &Loaded) {
        if !super::needs_classification(&l.invoice) {
            return;
        }
        let id = l.invoice.id;
        if !self.busy.lock().expect("lock").insert(id) {
            return;
        }
        let waiting: Vec<usize> = (0..l.invoice.refunds.len())
            .filter(|i| {
                let c = &l.invoice.refunds[*i];
                c.awaiting_address() && c.sender_class.is_none()
            })
            .collect();
        let mut r = Ok(());
        for claim in waiting {
            r = self.claim(l, claim).await;
            if r.is_err() {
                break;
            }
        }
        self.busy.lock().expect("lock").remove(&id);
        if let Err(e) = r {
            tracing::info!(invoice = %id, error = %e, "refund not classified yet");
        }
    }

    async fn claim(&self, l: &Loaded, claim: usize) -> anyhow::Result<()> {
        let Some(refund) = l.invoice.refunds.get(claim).cloned() else {
            return Ok(());
        };
        let rate = l
            .invoice
            .quote(&refund.chain, &refund.asset)
            .map(|q| q.rate.clone())
            .ok_or_else(|| anyhow::anyhow!("no quote for the refund's coin"))?;
        let livemode = l.project.mode == Mode::Live;
        let native = super::native_symbol(self.reg, &refund.chain)
            .ok_or_else(|| anyhow::anyhow!("unknown chain {}", refund.chain))?;
        let native_usd = self.market.usable_price(native, livemode).await;
        let claimed = if livemode {
            None
        } else {
            reads::test_sender_class(self.store, &refund.chain, &refund.from_address).await?
        };
        let client: Arc<dyn ChainClient> = if livemode {
            self.reg
                .chain(&refund.chain)
                .and_then(|c| c.client().cloned())
                .ok_or_else(|| anyhow::anyhow!("no node for {}", refund.chain))?
        } else {
            let h = self
                .sim
                .get(self.store, self.reg, l.project.id, &refund.chain)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            Arc::new(h.client.clone())
        };
        let c = super::classify(
            client.as_ref(),
            self.reg,
            &refund,
            &rate,
            native_usd,
            claimed.as_deref(),
        )
        .await?;
        let (id, payment) = (InvoiceId::of(&l.invoice), refund.payment_id.into());
        self.store
            .write(move |ctx| super::apply_classification(ctx, id, claim, payment, &c))
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(())
    }
}
