//! Conversion rules per (project, chain): which chains can convert, the targets offered,
//! and the rule a project keeps (`GET`/`PUT /v1/conversions/rules`).

use super::*;

/// Whether conversions run on `chain` for a project in `mode`: `Err(reason)` names why not
/// (`no_dex_configured`). Test projects convert on the simulated chain of every EVM chain
/// (quotes from the test prices); live projects need `[chains.<id>.dex]`.
pub fn support(chain: &Chain, mode: Mode) -> Result<(), &'static str> {
    if !chain.is_evm() {
        return Err("no_dex_configured");
    }
    match mode {
        Mode::Test => Ok(()),
        Mode::Live if chain.dex.is_some() => Ok(()),
        Mode::Live => Err("no_dex_configured"),
    }
}

/// A chain's coins as conversion targets: stablecoins first, then every other coin, each in
/// registry order (SPEC.md section 2, Conversion rule).
fn targets(chain: &Chain) -> Vec<ConversionTargetView> {
    let mut v: Vec<&crate::registry::Asset> = chain.assets.iter().collect();
    v.sort_by_key(|a| !a.is_stable());
    v.into_iter()
        .map(|a| ConversionTargetView {
            symbol: a.symbol.clone(),
            stable: a.is_stable(),
            is_native: a.is_native,
            contract: a.contract.clone(),
        })
        .collect()
}

/// The unique key of a project's rule of `chain`.
fn rule_key(project: Uuid, chain: &str) -> Vec<u8> {
    index::unique(IndexTag::UniqueConversionRule, project, &[chain.as_bytes()])
}

/// The stored rule of `chain`, if any.
pub fn stored_rule(
    r: &impl ReadOps,
    project: Uuid,
    chain: &str,
) -> Result<Option<ConversionRule>, StoreError> {
    match r.unique_get(&rule_key(project, chain))? {
        Some(id) => r.get_in::<ConversionRule>(project, id),
        None => Ok(None),
    }
}

/// One `conversion_rule` object: the stored rule, or the default (off, the chain's first
/// stablecoin as target) when none was set.
pub fn rule_view(chain: &Chain, mode: Mode, rule: Option<&ConversionRule>) -> ConversionRuleView {
    let support = support(chain, mode);
    let default_target = chain
        .assets
        .iter()
        .find(|a| a.is_stable())
        .map(|a| a.symbol.clone());
    ConversionRuleView {
        object: "conversion_rule",
        chain: chain.id().into(),
        name: chain.info.name.into(),
        supported: support.is_ok(),
        unsupported_reason: support.err().map(Into::into),
        enabled: rule.is_some_and(|r| r.enabled) && support.is_ok(),
        target_asset: rule.map(|r| r.target_asset.clone()).or(default_target),
        keep_assets: rule.map(|r| r.keep_assets.clone()).unwrap_or_default(),
        targets: targets(chain),
        updated_at: rule.map(|r| ts(r.updated_at)),
    }
}

/// [`rules`] read on the blocking pool.
pub async fn rules_of(store: &appliance_storage::Store, s: Scope) -> Result<Value, StoreError> {
    store.read(move |r| rules(r, &s)).await
}

/// `GET /v1/conversion/rules`: one rule per chain the project lists, in registry order.
pub fn rules(r: &impl ReadOps, s: &Scope) -> Result<Value, StoreError> {
    let mut data = Vec::new();
    for c in &s.reg.chains {
        let eff = chains::effective(c, &s.project);
        if !eff.listed {
            continue;
        }
        let rule = stored_rule(r, s.project.id, c.id())?;
        data.push(rule_view(c, s.project.mode, rule.as_ref()));
    }
    Ok(json!({"object": "list", "data": data, "has_more": false, "next_cursor": null}))
}

/// `PUT /v1/conversion/rules/{chain}`.
#[derive(utoipa::ToSchema)]
#[schema(as = ConversionRuleUpdate)]
pub struct RuleUpdate {
    pub enabled: bool,
    /// A coin of the chain (400 `invalid_target` otherwise).
    #[schema(min_length = 1)]
    pub target_asset: String,
    /// Coins of the chain never converted (400 `invalid_keep_asset` for another).
    #[schema(value_type = Option<Vec<crate::services::types::SymbolIn>>, max_items = 64)]
    pub keep_assets: Vec<String>,
}

/// Sets a project's rule of `chain` (SPEC.md section 4, Conversions): it applies to the
/// next payment; queued rows keep the target they were written with. Switching a rule off
/// is always accepted; switching it on where conversions are not supported is 422
/// `conversion_unsupported_chain`. Errors: 400 `invalid_target`, `invalid_keep_asset`.
pub fn put_rule(
    ctx: &mut WriteCtx<'_>,
    s: &Scope,
    chain: &ChainId,
    u: RuleUpdate,
) -> Result<Value, ConversionError> {
    let eff = chains::resolve(&s.reg, &s.project, chain, "chain")?;
    let c = eff.chain;
    if u.enabled {
        if let Err(reason) = support(c, s.project.mode) {
            return Err(ConversionError::UnsupportedChain {
                chain: chain.to_string(),
                reason: reason.into(),
            });
        }
    }
    if c.asset(&u.target_asset).is_none() {
        return Err(ConversionError::InvalidTarget {
            target: u.target_asset,
            chain: chain.to_string(),
        });
    }
    let mut keep: Vec<String> = Vec::new();
    for k in u.keep_assets {
        if c.asset(&k).is_none() {
            return Err(ConversionError::InvalidKeepAsset {
                asset: k,
                chain: chain.to_string(),
            });
        }
        if !keep.contains(&k) {
            keep.push(k);
        }
    }
    let p = s.project.id;
    let now = ctx.now_us();
    let rule = match stored_rule(ctx, p, chain)? {
        Some(mut r) => {
            r.enabled = u.enabled;
            r.target_asset = u.target_asset;
            r.keep_assets = keep;
            r.updated_at = now;
            r
        }
        None => {
            let r = ConversionRule {
                id: appliance_storage::sources::new_id(),
                project_id: p,
                chain: chain.to_string(),
                enabled: u.enabled,
                target_asset: u.target_asset,
                keep_assets: keep,
                updated_at: now,
            };
            ctx.unique_put(&rule_key(p, chain), r.id)?;
            r
        }
    };
    ctx.put(&rule)?;
    Ok(crate::views::to_value(&rule_view(
        c,
        s.project.mode,
        Some(&rule),
    )))
}

// ---------------------------------------------------------------------------------------
// Quotes
