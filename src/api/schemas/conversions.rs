//! Conversion schemas (SPEC.md section 2, Conversion rule, Conversion, Conversion batch,
//! Conversion quote).

#![allow(dead_code)]

use super::*;

// ---------------------------------------------------------------------------------------
// Conversions (SPEC.md section 2, Conversion rule, Conversion, Conversion batch, Conversion
// quote)

/// A conversion row status filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum ConversionStatusIn {
    Queued,
    Converting,
    Converted,
    Skipped,
    Failed,
}

/// A conversion kind filter.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
pub enum ConversionKindIn {
    Auto,
    Manual,
}
