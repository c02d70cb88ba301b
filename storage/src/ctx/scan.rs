//! Whole-table reads, for start-up caches and operator listings ([`ScanOps`]).

use super::*;

/// Whole-table reads, for start-up caches and operator listings.
pub trait ScanOps: Reader {
    /// Every row of a table, in id order; a row that cannot be decoded is logged and passed
    /// over (`appliance verify` reports it).
    fn all<R: Row>(&self) -> Result<Vec<R>, StoreError> {
        let t = self.open(R::TABLE)?;
        let mut out = Vec::new();
        for e in t.iter()? {
            let (k, v) = e?;
            let id = Uuid::from_u128(k.value());
            if let Some(r) = decode_listed_row::<R>(id, v.value()) {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Rows of a table with an id above `after` (all of them for `None`), in id order, at
    /// most `limit`; an undecodable row is passed over as in [`ScanOps::all`]. Lets a reader
    /// follow a table whose ids only grow (UUID v7 minted on the writer thread), e.g. a
    /// chain watcher learning new deposit addresses.
    fn after<R: Row>(&self, after: Option<Uuid>, limit: usize) -> Result<Vec<R>, StoreError> {
        let t = self.open(R::TABLE)?;
        let mut out = Vec::new();
        let iter = match after {
            Some(a) if a.as_u128() == u128::MAX => return Ok(out),
            Some(a) => t.range(a.as_u128() + 1..)?,
            None => t.range(0u128..)?,
        };
        for e in iter.take(limit) {
            let (k, v) = e?;
            let id = Uuid::from_u128(k.value());
            if let Some(r) = decode_listed_row::<R>(id, v.value()) {
                out.push(r);
            }
        }
        Ok(out)
    }
}

impl ScanOps for ReadCtx {}
impl ScanOps for WriteCtx<'_> {}
