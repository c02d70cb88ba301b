use proptest::prelude::*;

use super::*;

const CORE: Dust = Dust::Relay { rate_kvb: 3_000 };
const POLICY: FeePolicy = FeePolicy {
    floor_kvb: 2_000,
    ceiling_kvb: 500_000,
    incremental_kvb: 1_000,
    dust: CORE,
};

fn coin(n: u32, value: u64, kind: ScriptKind) -> Coin {
    Coin {
        outpoint: OutPoint {
            txid: format!("{n:064x}"),
            vout: n % 3,
        },
        value,
        kind,
    }
}

fn pay(value: u64) -> Payment {
    Payment {
        kind: ScriptKind::P2wpkh,
        value,
    }
}

/// What every plan must hold: inputs = payments + change + fee, the fee pays `rate_kvb`
/// at the largest signed size, no output is dust, at most MAX_INPUTS inputs.
fn balanced(p: &Plan, rate_kvb: u64, change_kind: ScriptKind, dust: Dust) {
    let inputs: u64 = p.inputs.iter().map(|c| c.value).sum();
    let paid: u64 = p.payments.iter().map(|x| x.value).sum();
    assert_eq!(inputs, paid + p.change.unwrap_or(0) + p.fee, "{p:?}");
    assert!(p.fee >= fee_for(p.weight, rate_kvb), "{p:?}");
    if let Some(c) = p.change {
        assert!(c >= dust.limit(change_kind), "{p:?}");
    }
    for x in &p.payments {
        assert!(x.value >= dust.limit(x.kind));
    }
    assert!(!p.inputs.is_empty() && p.inputs.len() <= MAX_INPUTS);
}

#[test]
fn sizes_match_the_well_known_transactions() {
    // One P2WPKH input to one P2WPKH output: 109.5 vbytes, 110 rounded up.
    let w = tx_weight([&coin(1, 1, ScriptKind::P2wpkh)], [ScriptKind::P2wpkh]);
    assert_eq!((w, vsize(w)), (438, 110));
    // One P2PKH input to one P2PKH output: 192 bytes (a 72-byte signature).
    let w = tx_weight([&coin(1, 1, ScriptKind::P2pkh)], [ScriptKind::P2pkh]);
    assert_eq!((w, vsize(w)), (768, 192));
    // 253 outputs: the output count takes 3 bytes.
    let many = tx_weight(
        [&coin(1, 1, ScriptKind::P2pkh)],
        vec![ScriptKind::P2pkh; 253],
    );
    assert_eq!(many, 768 + 252 * 136 + 8);
    assert_eq!(fee_for(438, 2_000), 220);
    assert_eq!(fee_for(438, 1_001), 111);
}

#[test]
fn scripts_are_classified_by_their_exact_form() {
    let mut p2wpkh = vec![0x00, 0x14];
    p2wpkh.extend([7; 20]);
    assert_eq!(ScriptKind::of(&p2wpkh), Some(ScriptKind::P2wpkh));
    let mut p2pkh = vec![0x76, 0xa9, 0x14];
    p2pkh.extend([7; 20]);
    p2pkh.extend([0x88, 0xac]);
    assert_eq!(ScriptKind::of(&p2pkh), Some(ScriptKind::P2pkh));
    let mut p2sh = vec![0xa9, 0x14];
    p2sh.extend([7; 20]);
    p2sh.push(0x87);
    assert_eq!(ScriptKind::of(&p2sh), Some(ScriptKind::P2sh));
    let mut p2tr = vec![0x51, 0x20];
    p2tr.extend([7; 32]);
    assert_eq!(ScriptKind::of(&p2tr), Some(ScriptKind::P2tr));
    // One byte short, an OP_RETURN, nothing: not payable.
    assert_eq!(ScriptKind::of(&p2wpkh[..21]), None);
    assert_eq!(ScriptKind::of(&[0x6a, 0x01, 0x00]), None);
    assert_eq!(ScriptKind::of(&[]), None);
    assert_eq!(ScriptKind::P2sh.input_weight(), None);
}

#[test]
fn dust_follows_bitcoin_core_and_dogecoin() {
    assert_eq!(CORE.limit(ScriptKind::P2wpkh), 294);
    assert_eq!(CORE.limit(ScriptKind::P2pkh), 546);
    assert_eq!(Dust::Fixed(1_000_000).limit(ScriptKind::P2pkh), 1_000_000);
}

#[test]
fn the_rate_is_the_estimate_between_floor_and_ceiling() {
    assert_eq!(POLICY.rate(None), 2_000);
    assert_eq!(POLICY.rate(Some(1_000)), 2_000);
    assert_eq!(POLICY.rate(Some(12_345)), 12_345);
    assert_eq!(POLICY.rate(Some(9_000_000)), 500_000);
}

#[test]
fn a_sweep_moves_everything_less_its_fee_or_waits() {
    let coins = [
        coin(1, 50_000, ScriptKind::P2wpkh),
        coin(2, 70_000, ScriptKind::P2wpkh),
    ];
    let p = plan_sweep(&coins, ScriptKind::P2wpkh, 2_000, CORE).unwrap();
    balanced(&p, 2_000, ScriptKind::P2wpkh, CORE);
    assert_eq!(p.inputs[0].value, 70_000, "largest first");
    assert_eq!(p.change, None);
    assert_eq!(p.payments[0].value, 120_000 - p.fee);
    // 2 inputs, 1 output: 40 + 2*272 + 124 + 2 = 710 WU = 178 vB, 356 sat at 2 sat/vB.
    assert_eq!(p.fee, 356);
    // A 220-sat fee is over 5% of 4,000 sat: wait.
    assert!(matches!(
        plan_sweep(
            &[coin(1, 4_000, ScriptKind::P2wpkh)],
            ScriptKind::P2wpkh,
            2_000,
            CORE
        ),
        Err(SweepWait::FeeOverFivePercent {
            total: 4_000,
            fee: 220
        })
    ));
    // Exactly 5%: sent.
    assert!(plan_sweep(
        &[coin(1, 4_400, ScriptKind::P2wpkh)],
        ScriptKind::P2wpkh,
        2_000,
        CORE
    )
    .is_ok());
    // Dust after the fee (a fixed dust limit above what is left).
    assert!(matches!(
        plan_sweep(
            &[coin(1, 900_000, ScriptKind::P2pkh)],
            ScriptKind::P2pkh,
            2_000,
            Dust::Fixed(1_000_000)
        ),
        Err(SweepWait::Dust { .. })
    ));
    assert_eq!(
        plan_sweep(&[], ScriptKind::P2wpkh, 2_000, CORE),
        Err(SweepWait::Nothing)
    );
}

#[test]
fn a_sweep_of_many_coins_takes_the_largest_500() {
    let coins: Vec<Coin> = (0..700)
        .map(|i| coin(i, 10_000 + u64::from(i), ScriptKind::P2pkh))
        .collect();
    let p = plan_sweep(&coins, ScriptKind::P2pkh, 1_000, CORE).unwrap();
    assert_eq!(p.inputs.len(), MAX_INPUTS);
    assert_eq!(p.inputs.iter().map(|c| c.value).min(), Some(10_200));
    assert!(vsize(p.weight) < 100_000);
    balanced(&p, 1_000, ScriptKind::P2pkh, CORE);
}

#[test]
fn a_payout_pays_exactly_with_change_back() {
    let coins = [
        coin(1, 10_000, ScriptKind::P2wpkh),
        coin(2, 300_000, ScriptKind::P2wpkh),
        coin(3, 40_000, ScriptKind::P2wpkh),
    ];
    let p = plan_payout(&coins, &[pay(250_000)], ScriptKind::P2wpkh, 2_000, CORE).unwrap();
    balanced(&p, 2_000, ScriptKind::P2wpkh, CORE);
    assert_eq!(p.payments, vec![pay(250_000)]);
    assert_eq!(p.inputs.len(), 1);
    assert_eq!(p.inputs[0].value, 300_000);
    assert!(p.change.is_some());
    // More than the largest coin: two coins.
    let p = plan_payout(&coins, &[pay(320_000)], ScriptKind::P2wpkh, 2_000, CORE).unwrap();
    balanced(&p, 2_000, ScriptKind::P2wpkh, CORE);
    assert_eq!(p.inputs.len(), 2);
}

#[test]
fn a_coin_that_fits_is_spent_without_change() {
    // 1-in 1-out P2WPKH at 2 sat/vB: 220 sat of fee. A coin 300 sat over that leaves less
    // than a change output costs (62 sat + 294 dust): spent whole, no change.
    let coins = [
        coin(1, 1_000_000, ScriptKind::P2wpkh),
        coin(2, 100_520, ScriptKind::P2wpkh),
    ];
    let p = plan_payout(&coins, &[pay(100_000)], ScriptKind::P2wpkh, 2_000, CORE).unwrap();
    balanced(&p, 2_000, ScriptKind::P2wpkh, CORE);
    assert_eq!(p.inputs, vec![coins[1].clone()]);
    assert_eq!((p.change, p.fee), (None, 520));
}

#[test]
fn a_payout_refuses_dust_and_says_what_is_short() {
    let coins = [coin(1, 10_000, ScriptKind::P2wpkh)];
    assert_eq!(
        plan_payout(&coins, &[pay(293)], ScriptKind::P2wpkh, 2_000, CORE),
        Err(PlanError::DustPayment {
            value: 293,
            limit: 294
        })
    );
    match plan_payout(&coins, &[pay(9_900)], ScriptKind::P2wpkh, 2_000, CORE) {
        Err(PlanError::Short {
            available: 10_000,
            needed,
        }) => assert_eq!(needed, 9_900 + 220),
        other => panic!("{other:?}"),
    }
    // Coins the appliance cannot spend are not counted.
    let p2sh = [coin(1, 10_000_000, ScriptKind::P2sh)];
    assert!(matches!(
        plan_payout(&p2sh, &[pay(1_000)], ScriptKind::P2wpkh, 2_000, CORE),
        Err(PlanError::Short { available: 0, .. })
    ));
}

#[test]
fn a_replacement_outbids_the_stuck_send_from_its_change() {
    let coins = [
        coin(1, 500_000, ScriptKind::P2wpkh),
        coin(2, 20_000, ScriptKind::P2wpkh),
    ];
    let first = plan_payout(&coins, &[pay(200_000)], ScriptKind::P2wpkh, 2_000, CORE).unwrap();
    let signed_vsize = vsize(first.weight) - 1;
    let prev = Replaced {
        plan: &first,
        signed_vsize,
    };
    let r = plan_replacement(prev, &coins, ScriptKind::P2wpkh, 2_000, &POLICY).unwrap();
    balanced(&r, 2_000, ScriptKind::P2wpkh, CORE);
    assert_eq!(r.inputs, first.inputs, "same inputs");
    assert_eq!(r.payments, first.payments, "the payment is untouched");
    // Rule 4: the old fee plus the new size at 1 sat/vB; rule 6: a higher rate.
    assert!(r.fee >= first.fee + vsize(r.weight));
    assert!(r.fee * signed_vsize > first.fee * vsize(r.weight));
    // A much higher rate: the change pays it.
    let r = plan_replacement(prev, &coins, ScriptKind::P2wpkh, 100_000, &POLICY).unwrap();
    balanced(&r, 100_000, ScriptKind::P2wpkh, CORE);
    assert_eq!(r.inputs, first.inputs);
}

#[test]
fn a_replacement_adds_a_coin_when_the_change_cannot_pay() {
    // A changeless send: the bump must come from a new input.
    let spent = coin(1, 100_520, ScriptKind::P2wpkh);
    let first = plan_payout(
        std::slice::from_ref(&spent),
        &[pay(100_000)],
        ScriptKind::P2wpkh,
        2_000,
        CORE,
    )
    .unwrap();
    assert_eq!(first.change, None);
    let prev = Replaced {
        plan: &first,
        signed_vsize: vsize(first.weight),
    };
    assert_eq!(
        plan_replacement(
            prev,
            std::slice::from_ref(&spent),
            ScriptKind::P2wpkh,
            20_000,
            &POLICY
        ),
        Err(PlanError::CannotBump)
    );
    let more = [spent.clone(), coin(2, 50_000, ScriptKind::P2wpkh)];
    let r = plan_replacement(prev, &more, ScriptKind::P2wpkh, 20_000, &POLICY).unwrap();
    balanced(&r, 20_000, ScriptKind::P2wpkh, CORE);
    assert_eq!(r.inputs.len(), 2);
    assert_eq!(
        r.inputs[0], spent,
        "the replaced send's inputs stay, in order"
    );
    assert_eq!(r.payments, first.payments);
}

proptest! {
    #[test]
    fn every_plan_balances_and_pays_its_rate(
        values in prop::collection::vec(1_000u64..5_000_000, 1..40),
        amounts in prop::collection::vec(294u64..3_000_000, 1..4),
        rate in 1_000u64..60_000,
        legacy in any::<bool>(),
    ) {
        let kind = if legacy { ScriptKind::P2pkh } else { ScriptKind::P2wpkh };
        let coins: Vec<Coin> = values.iter().enumerate().map(|(i, v)| coin(i as u32, *v, kind)).collect();
        let payments: Vec<Payment> = amounts.iter().map(|a| Payment { kind: ScriptKind::P2wpkh, value: *a }).collect();
        let available: u64 = values.iter().sum();
        match plan_payout(&coins, &payments, kind, rate, CORE) {
            Ok(p) => {
                balanced(&p, rate, kind, CORE);
                prop_assert_eq!(&p.payments, &payments);
                let signed_vsize = vsize(p.weight);
                let bump = rate * 2;
                if let Ok(r) = plan_replacement(Replaced { plan: &p, signed_vsize }, &coins, kind, bump, &POLICY) {
                    balanced(&r, bump, kind, CORE);
                    prop_assert_eq!(&r.payments, &payments);
                    prop_assert!(r.fee >= p.fee + vsize(r.weight));
                    prop_assert_eq!(&r.inputs[..p.inputs.len()], &p.inputs[..]);
                }
            }
            Err(PlanError::Short { available: a, needed }) => {
                prop_assert_eq!(a, available);
                prop_assert!(needed > available);
            }
            Err(e) => prop_assert!(false, "{e:?}"),
        }
        if let Ok(s) = plan_sweep(&coins, ScriptKind::P2wpkh, rate, CORE) {
            balanced(&s, rate, ScriptKind::P2wpkh, CORE);
            prop_assert!(s.fee * 20 <= s.inputs.iter().map(|c| c.value).sum::<u64>());
        }
    }
}
