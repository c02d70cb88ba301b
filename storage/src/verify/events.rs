//! The events' invariants: sequences are contiguous from 1 per project, a compact event
//! refers to its project's readable row, and the runs of the event indexes and of the lists
//! decode.

use super::*;

/// Each project's event sequence is contiguous from 1, and each compact event refers to a
/// readable row of its project ([`check_event_refers`]).
pub(super) fn check_events(ctx: &ReadCtx, rep: &mut Report) -> Result<(), StoreError> {
    let events = ctx.open(EVENTS)?;
    let mut last: BTreeMap<u128, u64> = BTreeMap::new();
    for e in events.iter()? {
        let (k, v) = e?;
        let (p, seq) = k.value();
        rep.events += 1;
        if let Ok(ev) = decode::<crate::records::Event>(v.value()) {
            check_event_refers(ctx, Uuid::from_u128(p), seq, &ev, rep)?;
        }
        let prev = last.insert(p, seq).unwrap_or(0);
        if seq != prev + 1 {
            rep.violations.push(format!(
                "project {} event sequence jumps from {prev} to {seq}",
                Uuid::from_u128(p)
            ));
        }
    }
    Ok(())
}

/// A compact event (a deposit event of schema 6, a payout or wallet event of schema 10)
/// renders its data from its resource's row: that row must be its project's and decode, and
/// a credited deposit state needs a row that names its journal entry.
fn check_event_refers(
    ctx: &ReadCtx,
    project: Uuid,
    seq: u64,
    ev: &crate::records::Event,
    rep: &mut Report,
) -> Result<(), StoreError> {
    use crate::records::{Customer, ResourceState};
    let (kind, readable) = match (&ev.deposit, &ev.state) {
        (Some(st), _) => {
            let row = readable_row::<Deposit>(ctx, project, &ev.resource_id)?;
            // A credited state names its entry through the row (schema 14): the
            // row must name one.
            let credited = st.ledger_tx_id == Some(crate::records::DepositState::CREDITED);
            if credited && row.as_ref().is_some_and(|d| d.ledger_tx_id.is_none()) {
                rep.violations.push(format!(
                    "project {project} event {seq} ({}) says deposit {} was credited, but the deposit names no journal entry",
                    ev.event_type, ev.resource_id
                ));
            }
            ("deposit", row.is_some())
        }
        (None, Some(ResourceState::Payout(_))) => {
            ("payout", readable::<Payout>(ctx, project, &ev.resource_id)?)
        }
        (None, Some(ResourceState::Wallet)) => {
            ("wallet", readable::<Wallet>(ctx, project, &ev.resource_id)?)
        }
        (None, Some(ResourceState::Customer)) => (
            "customer",
            readable::<Customer>(ctx, project, &ev.resource_id)?,
        ),
        (None, Some(ResourceState::CustomerAt(_))) => ("", true),
        (None, None) => ("", true),
    };
    if !readable {
        rep.violations.push(format!(
            "project {project} event {seq} ({}) refers to {kind} {}, which is not that project's readable row",
            ev.event_type, ev.resource_id
        ));
    }
    Ok(())
}

/// Whether `resource_id` names a row of `R` of `project` that decodes (what a compact
/// event's reader needs, `ReadOps::complete_event`).
fn readable<R: crate::records::Row>(
    ctx: &ReadCtx,
    project: Uuid,
    resource_id: &str,
) -> Result<bool, StoreError> {
    Ok(readable_row::<R>(ctx, project, resource_id)?.is_some())
}

/// The row [`readable`] finds, if any.
fn readable_row<R: crate::records::Row>(
    ctx: &ReadCtx,
    project: Uuid,
    resource_id: &str,
) -> Result<Option<R>, StoreError> {
    let Ok(id) = Uuid::parse_str(resource_id) else {
        return Ok(None);
    };
    match ctx.get_in::<R>(project, id) {
        Ok(row) => Ok(row),
        Err(StoreError::Corrupt(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The event indexes' runs decode (a run that does not is left out of lists).
pub(super) fn check_event_runs(ctx: &ReadCtx, rep: &mut Report) -> Result<(), StoreError> {
    for (def, what) in [(EVENT_TYPE_RUNS, "type"), (EVENT_RESOURCE_RUNS, "resource")] {
        let decodes = |k: &[u8], v: &[u8]| {
            crate::event_runs::split_key(k)
                .and_then(|(_, first)| crate::event_runs::decode(first, v))
        };
        check_runs(ctx, rep, def, decodes, |key| {
            format!("event {what} index run {key} does not decode; its events are left out of lists by {what}")
        })?;
    }
    Ok(())
}

/// The lists' runs decode (the rows of a run that does not are reported as missing an index
/// entry).
pub(super) fn check_list_runs(ctx: &ReadCtx, rep: &mut Report) -> Result<(), StoreError> {
    let decodes = |k: &[u8], v: &[u8]| {
        crate::id_runs::split_key(k).and_then(|(_, first)| crate::id_runs::decode(first, v))
    };
    for def in run_tables() {
        check_runs(ctx, rep, def, decodes, |key| {
            format!("list run {key} does not decode; its ids are left out of the lists it serves")
        })?;
    }
    Ok(())
}

/// Reports each run of `def` that `decode` refuses, named by its key (hex).
fn check_runs<T>(
    ctx: &ReadCtx,
    rep: &mut Report,
    def: crate::open_tables::RunsDef,
    decode: impl Fn(&[u8], &[u8]) -> Option<T>,
    violation: impl Fn(&str) -> String,
) -> Result<(), StoreError> {
    for e in ctx.open(def)?.iter()? {
        let (k, v) = e?;
        if decode(k.value(), v.value()).is_none() {
            rep.violations.push(violation(&hex::encode(k.value())));
        }
    }
    Ok(())
}
