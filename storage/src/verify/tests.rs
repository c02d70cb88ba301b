use super::balances::Wide;
use super::{funding_cents, payment_fee_cents};

#[test]
fn fees_and_funding_credits_are_recomputed_exactly() {
    // 0.5% of 100.00 is 50 cents, plus 10; half up; capped.
    assert_eq!(payment_fee_cents(10_000, 50, 10, 500), 60);
    assert_eq!(payment_fee_cents(101, 50, 10, 500), 11);
    assert_eq!(payment_fee_cents(1_000_000, 50, 10, 500), 500);
    assert_eq!(
        payment_fee_cents(u64::MAX, 10_000, u64::MAX, u64::MAX),
        u64::MAX
    );
    // 25 USDT at par; 0.01 ETH at 3000.00; rounded down to the cent.
    assert_eq!(funding_cents(25_000_000, 6, "1.00"), Some(2_500));
    assert_eq!(funding_cents(10u128.pow(16), 18, "3000.00"), Some(3_000));
    assert_eq!(funding_cents(9_999, 6, "1"), Some(0));
    assert_eq!(funding_cents(1_234_567, 6, "0.5"), Some(61));
    assert_eq!(funding_cents(1, 6, "x"), None);
    assert_eq!(funding_cents(1, 6, ".5"), None);
    assert_eq!(funding_cents(u128::MAX, 0, "2"), None);
}

#[test]
fn wide_totals_are_exact_past_u128() {
    let (mut a, mut b) = (Wide::default(), Wide::default());
    a.add(u128::MAX);
    a.add(u128::MAX);
    b.add(u128::MAX - 1);
    b.add(u128::MAX);
    assert_ne!(a, b, "off by one past u128 must still differ");
    b.add(1);
    assert_eq!(a, b);
    assert_eq!(a.hi, 1);
}
