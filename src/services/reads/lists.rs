//! The list queries of the API: for each resource, which index serves which filter, and
//! what the rows are checked against. One place knows the store's index layout for reads.

use appliance_storage::index::{self, IndexTag};
use appliance_storage::records::{
    ApiKey, BillingEntry, Conversion, ConversionKind, ConversionStatus, Customer, CustomerStatus,
    DeliveryStatus, Deposit, DepositStatus, EntryKind, Invoice, InvoiceStatus, Payout,
    PayoutStatus, Sweep, SweepStatus, Wallet, WebhookDelivery,
};
use appliance_storage::{Page, ReadOps, Store, StoreError};

use super::{page as page_of, row, PageReq};

use crate::services::types::{CustomerId, DepositId, Id, ProjectId, WalletId, WebhookEndpointId};

/// Which customers `GET /v1/customers` lists: by `reference_id` (at most one), else by
/// `status` (`active` | `disabled`), else all.
pub struct CustomerQuery {
    pub reference_id: Option<String>,
    pub status: Option<CustomerStatus>,
}

/// A page of the project's customers, newest first, as `q` selects.
pub async fn customers(
    store: &Store,
    project: ProjectId,
    q: CustomerQuery,
    page: PageReq,
) -> Result<Page<Customer>, StoreError> {
    let CustomerQuery {
        reference_id,
        status,
    } = q;
    let prefix = first_index(
        project,
        &[
            (IndexTag::CustomersByRef, &[text(&reference_id)]),
            (IndexTag::CustomersByStatus, &[name(status)]),
        ],
        IndexTag::Customers,
    );
    page_of(store, prefix, page, move |c: &Customer| {
        status.is_none_or(|s| c.status == s)
    })
    .await
}

/// A page of the project's API keys, newest first; revoked ones only with
/// `include_revoked` (`GET /v1/api_keys`).
pub async fn api_keys(
    store: &Store,
    project: ProjectId,
    include_revoked: bool,
    page: PageReq,
) -> Result<Page<ApiKey>, StoreError> {
    let prefix = index::prefix(IndexTag::ApiKeys, project.uuid(), &[]);
    page_of(store, prefix, page, move |k: &ApiKey| {
        include_revoked || k.revoked_at.is_none()
    })
    .await
}

/// A page of the project's billing entries, newest first, of one `kind` or all
/// (`GET /v1/billing/entries`).
pub async fn billing_entries(
    store: &Store,
    project: ProjectId,
    kind: Option<EntryKind>,
    page: PageReq,
) -> Result<Page<BillingEntry>, StoreError> {
    let prefix = first_index(
        project,
        &[(IndexTag::BillingEntriesByKind, &[name(kind)])],
        IndexTag::BillingEntries,
    );
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
    project: ProjectId,
    q: ConversionQuery,
    page: PageReq,
) -> Result<Page<Conversion>, StoreError> {
    let ConversionQuery {
        status,
        chain,
        kind,
    } = q;
    let prefix = first_index(
        project,
        &[
            (IndexTag::ConversionsByStatus, &[name(status)]),
            (IndexTag::ConversionsByChain, &[text(&chain)]),
            (IndexTag::ConversionsByKind, &[name(kind)]),
        ],
        IndexTag::Conversions,
    );
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
    pub customer: Option<CustomerId>,
    pub wallet: Option<WalletId>,
    pub chain: Option<String>,
    pub status: Option<DepositStatus>,
    /// Created at or after this time (µs since the Unix epoch).
    pub since: Option<i64>,
}

/// A page of the project's deposits, newest first, as `q` selects.
pub async fn deposits(
    store: &Store,
    project: ProjectId,
    q: DepositQuery,
    page: PageReq,
) -> Result<Page<Deposit>, StoreError> {
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
        Some(w) => match row::<Wallet>(store, project, w)? {
            Some(row) => Some(row.customer_id),
            None => return Ok(empty()),
        },
        None => None,
    };
    let prefix = match wallet_owner.or(customer.map(Id::uuid)) {
        Some(c) => index::deposits_of_customer(project.uuid(), c),
        None => first_index(
            project,
            &[
                (IndexTag::DepositsByStatus, &[name(status)]),
                (IndexTag::DepositsByChain, &[text(&chain)]),
            ],
            IndexTag::Deposits,
        ),
    };
    page_of(store, prefix, page, move |d: &Deposit| {
        customer.is_none_or(|c| d.customer_id == c.uuid())
            && wallet.is_none_or(|w| d.wallet_id == w.uuid())
            && chain.as_ref().is_none_or(|c| &d.chain == c)
            && status.is_none_or(|s| d.status == s)
            && since.is_none_or(|t| d.created_at >= t)
    })
    .await
}

/// The project's deposit `id` as `GET /v1/deposits/{id}` shows it: an invoice payment is
/// the invoice's (docs/decisions.md, Invoices), a funding transfer billing's
/// (docs/decisions.md, Billing), so neither is a deposit here.
pub fn deposit(
    store: &Store,
    project: ProjectId,
    id: DepositId,
) -> Result<Option<Deposit>, StoreError> {
    Ok(row::<Deposit>(store, project, id)?.filter(|d| d.invoice_id.is_none() && !d.funding))
}

/// Which payouts `GET /v1/payouts` lists. The index follows the first filter set
/// (reference, customer, status, chain); the others filter the rows.
pub struct PayoutQuery {
    pub reference: Option<String>,
    pub customer: Option<CustomerId>,
    pub status: Option<PayoutStatus>,
    pub chain: Option<String>,
}

/// A page of the project's payouts, newest first, as `q` selects.
pub async fn payouts(
    store: &Store,
    project: ProjectId,
    q: PayoutQuery,
    page: PageReq,
) -> Result<Page<Payout>, StoreError> {
    let PayoutQuery {
        reference,
        customer,
        status,
        chain,
    } = q;
    let prefix = first_index(
        project,
        &[
            (IndexTag::PayoutsByReference, &[text(&reference)]),
            (IndexTag::PayoutsByCustomer, &[id(&customer)]),
            (IndexTag::PayoutsByStatus, &[name(status)]),
            (IndexTag::PayoutsByChain, &[text(&chain)]),
        ],
        IndexTag::Payouts,
    );
    page_of(store, prefix, page, move |x: &Payout| {
        customer.is_none_or(|c| x.customer_id == Some(c.uuid()))
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
    project: ProjectId,
    wallet: Option<WalletId>,
    status: Option<SweepStatus>,
    page: PageReq,
) -> Result<Page<Sweep>, StoreError> {
    let prefix = match wallet {
        Some(w) => match row::<Wallet>(store, project, w)? {
            Some(row) => index::sweeps_of_wallet(project.uuid(), row.customer_id, w.uuid()),
            None => return Ok(empty()),
        },
        None => first_index(
            project,
            &[(IndexTag::SweepsByStatus, &[name(status)])],
            IndexTag::Sweeps,
        ),
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
    project: ProjectId,
    customer: Option<CustomerId>,
    chain: Option<String>,
    page: PageReq,
) -> Result<Page<Wallet>, StoreError> {
    let prefix = first_index(
        project,
        &[
            (IndexTag::WalletsByCustomer, &[id(&customer)]),
            (IndexTag::WalletsByChain, &[text(&chain)]),
        ],
        IndexTag::Wallets,
    );
    page_of(store, prefix, page, move |w: &Wallet| {
        chain.as_ref().is_none_or(|c| &w.chain == c)
    })
    .await
}

/// A page of the project's invoices, newest first, in one status or all.
pub async fn invoices(
    store: &Store,
    project: ProjectId,
    status: Option<InvoiceStatus>,
    page: PageReq,
) -> Result<Page<Invoice>, StoreError> {
    let prefix = first_index(
        project,
        &[(IndexTag::InvoicesByStatus, &[name(status)])],
        IndexTag::Invoices,
    );
    page_of(store, prefix, page, move |i: &Invoice| {
        status.is_none_or(|s| i.status == s)
    })
    .await
}

/// Which webhook deliveries `GET /v1/webhook_deliveries` lists. An event id the project
/// does not have lists nothing.
pub struct DeliveryQuery {
    pub endpoint: Option<WebhookEndpointId>,
    pub status: Option<DeliveryStatus>,
    /// `evt_...`.
    pub event_id: Option<String>,
}

/// A page of the project's webhook deliveries, newest first, as `q` selects.
pub async fn deliveries(
    store: &Store,
    project: ProjectId,
    q: DeliveryQuery,
    page: PageReq,
) -> Result<Page<WebhookDelivery>, StoreError> {
    let DeliveryQuery {
        endpoint,
        status,
        event_id,
    } = q;
    let event = match event_id {
        None => None,
        Some(e) => match store.read(move |r| r.event(project.uuid(), &e)).await? {
            Some(ev) => Some(ev.sequence),
            None => return Ok(empty()),
        },
    };
    let sequence = event.map(u64::to_be_bytes);
    let sequence = sequence.as_ref().map(<[u8; 8]>::as_slice);
    let prefix = first_index(
        project,
        &[
            (IndexTag::WebhookDeliveriesByEvent, &[sequence]),
            (
                IndexTag::WebhookDeliveriesByEndpointStatus,
                &[id(&endpoint), name(status)],
            ),
            (IndexTag::WebhookDeliveriesByEndpoint, &[id(&endpoint)]),
            (IndexTag::WebhookDeliveriesByStatus, &[name(status)]),
        ],
        IndexTag::WebhookDeliveries,
    );
    page_of(store, prefix, page, move |d: &WebhookDelivery| {
        endpoint.is_none_or(|e| d.endpoint_id == e.uuid())
            && status.is_none_or(|s| d.status == s)
            && event.is_none_or(|q| d.event_sequence == q)
    })
    .await
}

/// Every delivery of the project's event `event_id` (`evt_...`), newest first, at most
/// `max`; `None` when the project has no such event.
pub async fn event_deliveries(
    store: &Store,
    project: ProjectId,
    event_id: String,
    max: usize,
) -> Result<Option<Page<WebhookDelivery>>, StoreError> {
    let project = project.uuid();
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

/// The prefix of the first index in `choices` whose every key value is set (a list reads
/// the index of its most selective filter, in the order the choices give), else of `all`,
/// the project's every row of the resource.
fn first_index(
    project: ProjectId,
    choices: &[(IndexTag, &[Option<&[u8]>])],
    all: IndexTag,
) -> Vec<u8> {
    let project = project.uuid();
    choices
        .iter()
        .find_map(|(tag, values)| {
            let values = values.iter().copied().collect::<Option<Vec<&[u8]>>>()?;
            Some(index::prefix(*tag, project, &values))
        })
        .unwrap_or_else(|| index::prefix(all, project, &[]))
}

/// An index key value from a stored name (a status or kind, as `as_str` spells it).
fn name<N: StoredName>(value: Option<N>) -> Option<&'static [u8]> {
    value.map(|v| v.stored_name().as_bytes())
}

/// An index key value from a text filter (a chain, a reference).
fn text(value: &Option<String>) -> Option<&[u8]> {
    value.as_deref().map(str::as_bytes)
}

/// An index key value from an id filter.
fn id<R>(value: &Option<Id<R>>) -> Option<&[u8]> {
    value.as_ref().map(|v| v.as_uuid().as_bytes().as_slice())
}

/// The enums a list's index is keyed by, by their stored name.
trait StoredName: Copy {
    fn stored_name(self) -> &'static str;
}

macro_rules! stored_name {
    ($($ty:ty),+) => {$(
        impl StoredName for $ty {
            fn stored_name(self) -> &'static str {
                self.as_str()
            }
        }
    )+};
}
stored_name!(
    CustomerStatus,
    EntryKind,
    ConversionStatus,
    ConversionKind,
    DepositStatus,
    PayoutStatus,
    SweepStatus,
    InvoiceStatus,
    DeliveryStatus
);

fn empty<R>() -> Page<R> {
    Page {
        items: Vec::new(),
        has_more: false,
    }
}
