//! The list queries of the API: for each resource, which index serves which filter, and
//! what the rows are checked against. One place knows the store's index layout for reads.

use uuid::Uuid;

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{
    ApiKey, BillingEntry, Conversion, ConversionKind, ConversionStatus, Customer, CustomerStatus,
    DeliveryStatus, Deposit, DepositStatus, EntryKind, Invoice, InvoiceStatus, Payout,
    PayoutStatus, Sweep, SweepStatus, Wallet, WebhookDelivery,
};
use appliance_storage::{Page, ReadOps, Store, StoreError};

use super::{page as page_of, row, PageReq};

/// Which customers `GET /v1/customers` lists: by `reference_id` (at most one), else by
/// `status` (`active` | `disabled`), else all.
pub struct CustomerQuery {
    pub reference_id: Option<String>,
    pub status: Option<CustomerStatus>,
}

/// A page of the project's customers, newest first, as `q` selects.
pub async fn customers(
    store: &Store,
    project: Uuid,
    q: CustomerQuery,
    page: PageReq,
) -> Result<Page<Customer>, StoreError> {
    let CustomerQuery {
        reference_id,
        status,
    } = q;
    let prefix = match (&reference_id, &status) {
        (Some(r), _) => index::prefix(IndexTag::CustomersByRef, project, &[r.as_bytes()]),
        (None, Some(s)) => index::prefix(
            IndexTag::CustomersByStatus,
            project,
            &[s.as_str().as_bytes()],
        ),
        (None, None) => index::prefix(IndexTag::Customers, project, &[]),
    };
    page_of(store, prefix, page, move |c: &Customer| {
        status.is_none_or(|s| c.status == s)
    })
    .await
}

/// A page of the project's API keys, newest first; revoked ones only with
/// `include_revoked` (`GET /v1/api_keys`).
pub async fn api_keys(
    store: &Store,
    project: Uuid,
    include_revoked: bool,
    page: PageReq,
) -> Result<Page<ApiKey>, StoreError> {
    let prefix = index::prefix(IndexTag::ApiKeys, project, &[]);
    page_of(store, prefix, page, move |k: &ApiKey| {
        include_revoked || k.revoked_at.is_none()
    })
    .await
}

/// A page of the project's billing entries, newest first, of one `kind` or all
/// (`GET /v1/billing/entries`).
pub async fn billing_entries(
    store: &Store,
    project: Uuid,
    kind: Option<EntryKind>,
    page: PageReq,
) -> Result<Page<BillingEntry>, StoreError> {
    let prefix = match kind {
        Some(k) => index::prefix(
            IndexTag::BillingEntriesByKind,
            project,
            &[k.as_str().as_bytes()],
        ),
        None => index::prefix(IndexTag::BillingEntries, project, &[]),
    };
    page_of(store, prefix, page, move |e: &BillingEntry| {
        kind.is_none_or(|k| e.kind == k)
    })
    .await
}

/// Which conversions `GET /v1/conversions` lists; the index follows the first filter set
/// (status, then chain, then kind), the others filter the rows.
pub struct ConversionQuery {
    pub status: Option<ConversionStatus>,
    pub chain: Option<String>,
    pub kind: Option<ConversionKind>,
}

/// A page of the project's conversions, newest first, as `q` selects.
pub async fn conversions(
    store: &Store,
    project: Uuid,
    q: ConversionQuery,
    page: PageReq,
) -> Result<Page<Conversion>, StoreError> {
    let ConversionQuery {
        status,
        chain,
        kind,
    } = q;
    let p = project;
    let prefix = if let Some(s) = status {
        index::prefix(IndexTag::ConversionsByStatus, p, &[s.as_str().as_bytes()])
    } else if let Some(c) = &chain {
        index::prefix(IndexTag::ConversionsByChain, p, &[c.as_bytes()])
    } else if let Some(k) = kind {
        index::prefix(IndexTag::ConversionsByKind, p, &[k.as_str().as_bytes()])
    } else {
        index::prefix(IndexTag::Conversions, p, &[])
    };
    page_of(store, prefix, page, move |x: &Conversion| {
        status.is_none_or(|s| x.status == s)
            && chain.as_ref().is_none_or(|c| &x.chain == c)
            && kind.is_none_or(|k| x.kind == k)
    })
    .await
}

/// Which deposits `GET /v1/deposits` lists. The index follows the first filter set
/// (customer or wallet, then status, then chain); every filter also checks the rows.
pub struct DepositQuery {
    pub customer: Option<Uuid>,
    pub wallet: Option<Uuid>,
    pub chain: Option<String>,
    pub status: Option<DepositStatus>,
    /// Created at or after this time (µs since the Unix epoch).
    pub since: Option<i64>,
}

/// A page of the project's deposits, newest first, as `q` selects.
pub async fn deposits(
    store: &Store,
    project: Uuid,
    q: DepositQuery,
    page: PageReq,
) -> Result<Page<Deposit>, StoreError> {
    let p = project;
    let DepositQuery {
        customer,
        wallet,
        chain,
        status,
        since,
    } = q;
    // A customer's deposits to a wallet are listed from the customer's index (no index of
    // deposits by wallet; a wallet is its customer's only one on its chain): the wallet's
    // customer, read first, then the `wallet_id` filter. A wallet of another project, or
    // none, lists nothing.
    let wallet_owner = match wallet {
        Some(w) => match row::<Wallet>(store, p, w)? {
            Some(row) => Some(row.customer_id),
            None => return Ok(empty()),
        },
        None => None,
    };
    let prefix = if let Some(c) = wallet_owner.or(customer) {
        index::deposits_of_customer(p, c)
    } else if let Some(s) = status {
        index::prefix(IndexTag::DepositsByStatus, p, &[s.as_str().as_bytes()])
    } else if let Some(c) = &chain {
        index::prefix(IndexTag::DepositsByChain, p, &[c.as_bytes()])
    } else {
        index::prefix(IndexTag::Deposits, p, &[])
    };
    page_of(store, prefix, page, move |d: &Deposit| {
        customer.is_none_or(|c| d.customer_id == c)
            && wallet.is_none_or(|w| d.wallet_id == w)
            && chain.as_ref().is_none_or(|c| &d.chain == c)
            && status.is_none_or(|s| d.status == s)
            && since.is_none_or(|t| d.created_at >= t)
    })
    .await
}

/// The project's deposit `id` as `GET /v1/deposits/{id}` shows it: an invoice payment is
/// the invoice's (docs/decisions.md, Invoices), a funding transfer billing's
/// (docs/decisions.md, Billing), so neither is a deposit here.
pub fn deposit(store: &Store, project: Uuid, id: Uuid) -> Result<Option<Deposit>, StoreError> {
    Ok(row::<Deposit>(store, project, id)?.filter(|d| d.invoice_id.is_none() && !d.funding))
}

/// Which payouts `GET /v1/payouts` lists. The index follows the first filter set
/// (reference, customer, status, chain); the others filter the rows.
pub struct PayoutQuery {
    pub reference: Option<String>,
    pub customer: Option<Uuid>,
    pub status: Option<PayoutStatus>,
    pub chain: Option<String>,
}

/// A page of the project's payouts, newest first, as `q` selects.
pub async fn payouts(
    store: &Store,
    project: Uuid,
    q: PayoutQuery,
    page: PageReq,
) -> Result<Page<Payout>, StoreError> {
    let p = project;
    let PayoutQuery {
        reference,
        customer,
        status,
        chain,
    } = q;
    let prefix = if let Some(r) = &reference {
        index::prefix(IndexTag::PayoutsByReference, p, &[r.as_bytes()])
    } else if let Some(c) = customer {
        index::prefix(IndexTag::PayoutsByCustomer, p, &[c.as_bytes()])
    } else if let Some(s) = status {
        index::prefix(IndexTag::PayoutsByStatus, p, &[s.as_str().as_bytes()])
    } else if let Some(c) = &chain {
        index::prefix(IndexTag::PayoutsByChain, p, &[c.as_bytes()])
    } else {
        index::prefix(IndexTag::Payouts, p, &[])
    };
    page_of(store, prefix, page, move |x: &Payout| {
        customer.is_none_or(|c| x.customer_id == Some(c))
            && chain.as_ref().is_none_or(|c| &x.chain == c)
            && status.is_none_or(|s| x.status == s)
    })
    .await
}

/// A page of the project's sweeps, newest first: of one wallet, or in one status, or all.
/// A wallet's sweeps are indexed under its customer, so the wallet is read first; one of
/// another project, or none, lists nothing.
pub async fn sweeps(
    store: &Store,
    project: Uuid,
    wallet: Option<Uuid>,
    status: Option<SweepStatus>,
    page: PageReq,
) -> Result<Page<Sweep>, StoreError> {
    let p = project;
    let prefix = match (wallet, status) {
        (Some(w), _) => match row::<Wallet>(store, p, w)? {
            Some(row) => index::sweeps_of_wallet(p, row.customer_id, w),
            None => return Ok(empty()),
        },
        (None, Some(s)) => index::prefix(IndexTag::SweepsByStatus, p, &[s.as_str().as_bytes()]),
        (None, None) => index::prefix(IndexTag::Sweeps, p, &[]),
    };
    page_of(store, prefix, page, move |s: &Sweep| {
        status.is_none_or(|st| s.status == st)
    })
    .await
}

/// A page of the project's wallets, newest first: of one customer, or on one chain, or
/// all (`chain` also filters a customer's).
pub async fn wallets(
    store: &Store,
    project: Uuid,
    customer: Option<Uuid>,
    chain: Option<String>,
    page: PageReq,
) -> Result<Page<Wallet>, StoreError> {
    let p = project;
    let prefix = match (customer, &chain) {
        (Some(c), _) => index::prefix(IndexTag::WalletsByCustomer, p, &[c.as_bytes()]),
        (None, Some(ch)) => index::prefix(IndexTag::WalletsByChain, p, &[ch.as_bytes()]),
        (None, None) => index::prefix(IndexTag::Wallets, p, &[]),
    };
    page_of(store, prefix, page, move |w: &Wallet| {
        chain.as_ref().is_none_or(|c| &w.chain == c)
    })
    .await
}

/// A page of the project's invoices, newest first, in one status or all.
pub async fn invoices(
    store: &Store,
    project: Uuid,
    status: Option<InvoiceStatus>,
    page: PageReq,
) -> Result<Page<Invoice>, StoreError> {
    let prefix = match status {
        Some(s) => index::prefix(
            IndexTag::InvoicesByStatus,
            project,
            &[s.as_str().as_bytes()],
        ),
        None => index::prefix(IndexTag::Invoices, project, &[]),
    };
    page_of(store, prefix, page, move |i: &Invoice| {
        status.is_none_or(|s| i.status == s)
    })
    .await
}

/// Which webhook deliveries `GET /v1/webhook_deliveries` lists. An event id the project
/// does not have lists nothing.
pub struct DeliveryQuery {
    pub endpoint: Option<Uuid>,
    pub status: Option<DeliveryStatus>,
    /// `evt_...`.
    pub event_id: Option<String>,
}

/// A page of the project's webhook deliveries, newest first, as `q` selects.
pub async fn deliveries(
    store: &Store,
    project: Uuid,
    q: DeliveryQuery,
    page: PageReq,
) -> Result<Page<WebhookDelivery>, StoreError> {
    let p = project;
    let DeliveryQuery {
        endpoint,
        status,
        event_id,
    } = q;
    let event = match event_id {
        None => None,
        Some(e) => match store.read(move |r| r.event(p, &e)).await? {
            Some(ev) => Some(ev.sequence),
            None => return Ok(empty()),
        },
    };
    let prefix = match (endpoint, status, event) {
        (_, _, Some(seq)) => {
            index::prefix(IndexTag::WebhookDeliveriesByEvent, p, &[&seq.to_be_bytes()])
        }
        (Some(e), Some(s), None) => index::prefix(
            IndexTag::WebhookDeliveriesByEndpointStatus,
            p,
            &[e.as_bytes(), s.as_str().as_bytes()],
        ),
        (Some(e), None, None) => {
            index::prefix(IndexTag::WebhookDeliveriesByEndpoint, p, &[e.as_bytes()])
        }
        (None, Some(s), None) => index::prefix(
            IndexTag::WebhookDeliveriesByStatus,
            p,
            &[s.as_str().as_bytes()],
        ),
        (None, None, None) => index::prefix(IndexTag::WebhookDeliveries, p, &[]),
    };
    page_of(store, prefix, page, move |d: &WebhookDelivery| {
        endpoint.is_none_or(|e| d.endpoint_id == e)
            && status.is_none_or(|s| d.status == s)
            && event.is_none_or(|q| d.event_sequence == q)
    })
    .await
}

/// Every delivery of the project's event `event_id` (`evt_...`), newest first, at most
/// `max`; `None` when the project has no such event.
pub async fn event_deliveries(
    store: &Store,
    project: Uuid,
    event_id: String,
    max: usize,
) -> Result<Option<Page<WebhookDelivery>>, StoreError> {
    store
        .read(move |r| {
            let Some(ev) = r.event(project, &event_id)? else {
                return Ok(None);
            };
            let prefix = index::prefix(
                IndexTag::WebhookDeliveriesByEvent,
                project,
                &[&ev.sequence.to_be_bytes()],
            );
            r.list::<WebhookDelivery>(&prefix, None, max, |_| true)
                .map(Some)
        })
        .await
}

fn empty<R>() -> Page<R> {
    Page {
        items: Vec::new(),
        has_more: false,
    }
}
