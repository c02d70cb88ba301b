use super::*;
use crate::records::{Customer, Deposit, DepositStatus};

fn customer() -> Customer {
    Customer {
        id: Uuid::now_v7(),
        project_id: Uuid::now_v7(),
        reference_id: Some("ref-1".into()),
        email: None,
        status: crate::records::CustomerStatus::Active,
        metadata: serde_json::json!({"plan": "gold", "n": 7, "neg": -3, "f": 1.5}),
        created_at: 1_700_000_000_000_000,
    }
}

#[test]
fn both_encodings_decode_to_the_same_record() {
    let c = customer();
    let v2 = encode(&c);
    let v1 = encode_json_v1(&c);
    assert_eq!(v2[0], VALUE_VERSION);
    assert_eq!(v1[0], JSON_VERSION);
    let a: Customer = decode(&v2).unwrap();
    let b: Customer = decode(&v1).unwrap();
    assert_eq!(
        serde_json::to_value(&a).unwrap(),
        serde_json::to_value(&c).unwrap()
    );
    assert_eq!(
        serde_json::to_value(&b).unwrap(),
        serde_json::to_value(&c).unwrap()
    );
    assert!(v2.len() < v1.len(), "{} !< {}", v2.len(), v1.len());
    assert_eq!(raw_project_id(&v2), Some(c.project_id));
    assert_eq!(raw_project_id(&v1), Some(c.project_id));
}

#[test]
fn amounts_past_u64_survive() {
    let d = Deposit {
        asset: "ETH".into(),
        amount: u128::MAX - 5,
        status: DepositStatus::Detected,
        ledger_tx_id: None,
        reversal_tx_id: Some(Uuid::now_v7()),
        ..deposit()
    };
    let back: Deposit = decode(&encode(&d)).unwrap();
    assert_eq!(back.amount, d.amount);
    // Small amounts take a few bytes and read back exactly too.
    let small = Deposit {
        amount: 100_000_000,
        ..d.clone()
    };
    let bytes = encode(&small);
    assert!(bytes.len() + 10 < encode(&d).len());
    assert_eq!(decode::<Deposit>(&bytes).unwrap().amount, 100_000_000);
    assert_eq!(
        decode::<Deposit>(&encode(&Deposit {
            amount: u128::from(u64::MAX) + 1,
            ..d.clone()
        }))
        .unwrap()
        .amount,
        u128::from(u64::MAX) + 1
    );
    assert_eq!(back.reversal_tx_id, d.reversal_tx_id);
    assert_eq!(back.status, d.status);
}

/// A field added later (an `Option`, or `#[serde(default)]`) reads as absent from a row
/// written before it existed: no migration is needed for it.
#[test]
fn an_added_optional_field_needs_no_migration() {
    #[derive(Serialize)]
    struct Old {
        id: u32,
    }
    #[derive(serde::Deserialize)]
    struct New {
        id: u32,
        extra: Option<String>,
        #[serde(default)]
        count: u64,
    }
    let n: New = decode(&encode(&Old { id: 4 })).unwrap();
    assert_eq!((n.id, n.extra, n.count), (4, None, 0));
}

/// A table that is not a `Row` table gets the codec through `value_put` / `value_get`.
#[test]
fn other_tables_get_the_codec_through_value_ops() {
    use crate::{Store, StoreOptions, ValueOps};
    const T: TableDefinition<(u128, &str), &[u8]> = TableDefinition::new("test_values");
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("s.redb"), StoreOptions::default()).unwrap();
    let c = customer();
    let c2 = c.clone();
    store
        .write_blocking(move |ctx| ctx.value_put(T, (7, "a"), &c2))
        .unwrap();
    let back: Customer = store
        .read_blocking(|r| r.value_get(T, (7, "a")))
        .unwrap()
        .unwrap();
    assert_eq!(back.id, c.id);
    let raw = store
        .read_blocking(|r| {
            let t = crate::Reader::open(r, T)?;
            let v = t.get((7, "a"))?.unwrap().value().to_vec();
            Ok(v)
        })
        .unwrap();
    assert_eq!(raw[0], VALUE_VERSION);
    let none: Option<Customer> = store.read_blocking(|r| r.value_get(T, (8, "a"))).unwrap();
    assert!(none.is_none());
}

pub(crate) fn deposit() -> Deposit {
    Deposit {
        id: Uuid::now_v7(),
        project_id: Uuid::now_v7(),
        customer_id: Uuid::now_v7(),
        invoice_id: None,
        late: false,
        funding: false,
        awaiting_price: false,
        wallet_id: Uuid::now_v7(),
        chain: "ethereum".into(),
        asset: "USDT".into(),
        amount: 25_000_000,
        tx_hash: format!("0x{}", "ab".repeat(32)),
        log_index: 3,
        from_address: format!("0x{}", "11".repeat(20)),
        to_address: format!("0x{}", "22".repeat(20)),
        block_number: 9,
        block_time: 1_700_000_000_000_000,
        confirmations: 12,
        required_confirmations: 12,
        status: DepositStatus::Confirmed,
        failure_reason: None,
        ledger_tx_id: Some(Uuid::now_v7()),
        reversal_tx_id: None,
        manual: false,
        created_at: 1_700_000_000_000_000,
        updated_at: 1_700_000_000_000_001,
    }
}

/// A record of a keyed type, its positional form (version 3, as schema 13 wrote it)
/// and its named form decode to the same record, the keyed one the smallest: the
/// positional body less the id's 18 bytes, which the key puts back (plain `decode`
/// refuses it). `raw_project_id` finds the project of every such row in each form.
#[test]
fn positional_rows_read_like_named_ones_and_carry_the_project_second() {
    use crate::records::{Payout, PayoutStatus, Row, Sweep, SweepStatus, Wallet};
    fn check<R: Row + std::fmt::Debug>(r: &R) {
        assert_eq!(R::LAYOUT, Layout::Keyed);
        every_field_written(r);
        // Schema 15 writes times relative (version 5), schema 14 wrote them whole.
        let stored = encode_record(r);
        let keyed = encode_keyed(r);
        let pos = encode_positional(r);
        let named = encode(r);
        assert_eq!(stored[0], KEYED_TIMES_VERSION);
        assert_eq!(keyed[0], KEYED_VERSION);
        assert_eq!(pos[0], POSITIONAL_VERSION);
        assert_eq!(keyed.len() + 18, pos.len());
        let id = r.id().as_u128();
        for v in [&stored, &keyed, &pos, &named] {
            let back: R = decode_keyed(id, v).unwrap();
            assert_eq!(format!("{back:?}"), format!("{r:?}"));
        }
        for v in [&stored, &keyed] {
            assert!(matches!(decode::<R>(v), Err(StoreError::Corrupt(_))));
            // The id is the key's: read under another key, the row says so.
            let other: R = decode_keyed(id ^ 1, v).unwrap();
            assert_eq!(other.id().as_u128(), id ^ 1);
        }
        assert!(pos.len() < named.len(), "{} !< {}", pos.len(), named.len());
        for v in [&stored, &keyed, &pos] {
            assert_eq!(raw_project_id(v), Some(r.project_id()));
            assert_eq!(raw_project_id(&v[..v.len().min(40)]), Some(r.project_id()));
        }
    }
    let d = deposit();
    check(&d);
    // Options set and unset, flags on: no field is skipped, so none shifts.
    check(&Deposit {
        invoice_id: Some(Uuid::now_v7()),
        funding: true,
        awaiting_price: true,
        failure_reason: Some("reorg".into()),
        ledger_tx_id: None,
        amount: u128::MAX,
        ..d.clone()
    });
    // The deposit row of the loadgen's deposits: field names were about half of it.
    assert!(encode_record(&d).len() * 10 < encode(&d).len() * 6);
    check(&customer());
    check(&Wallet {
        id: Uuid::now_v7(),
        project_id: Uuid::now_v7(),
        customer_id: Uuid::now_v7(),
        invoice_id: None,
        chain: "tron".into(),
        role: "deposit".into(),
        status: "active".into(),
        address: "T9yD14Nj9j7xAB4dbGeiX9h8unkKHxuWwb".into(),
        memo: None,
        created_at: 1,
    });
    check(&Sweep {
        id: Uuid::now_v7(),
        project_id: Uuid::now_v7(),
        wallet_id: Uuid::now_v7(),
        chain: "ethereum".into(),
        asset: "ETH".into(),
        amount: 7,
        status: SweepStatus::Open,
        skip_reason: None,
        tx_hash: None,
        open_block: Some(3),
        submitted_block: None,
        created_at: 1,
        updated_at: 2,
        customer_id: Uuid::now_v7(),
    });
    check(&Payout {
        id: Uuid::now_v7(),
        project_id: Uuid::now_v7(),
        customer_id: None,
        chain: "ethereum".into(),
        asset: "USDT".into(),
        amount: 5,
        fee_amount: 1,
        to_address: format!("0x{}", "33".repeat(20)),
        memo: None,
        status: PayoutStatus::Queued,
        reference: Some("r".into()),
        tx_hash: None,
        failure_reason: None,
        amount_usd_cents: Some(500),
        created_by_key: Uuid::now_v7(),
        approved_by_key: None,
        queued_block: None,
        submitted_block: None,
        created_at: 1,
        updated_at: 2,
    });
    // Not a row of a positional layout, or too short: no project.
    assert_eq!(
        raw_project_id(&[POSITIONAL_VERSION, 0x92, 0xc0, 0xc0]),
        None
    );
    assert_eq!(raw_project_id(&encode_positional(&(1u8, 2u8))), None);
}

/// The number of fields `T`'s derived `Deserialize` reads (its `FIELDS`: the fields not
/// skipped), captured by a deserializer that does nothing else.
fn field_count<T: serde::de::DeserializeOwned>() -> usize {
    use serde::de::{value::Error, Error as _, Visitor};
    struct Fields(std::cell::Cell<usize>);
    impl<'de> serde::Deserializer<'de> for &Fields {
        type Error = Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Error> {
            Err(Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Error> {
            self.0.set(fields.len());
            Err(Error::custom("counted"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
            enum identifier ignored_any
        }
    }
    let f = Fields(std::cell::Cell::new(0));
    let _ = T::deserialize(&f);
    f.0.get()
}

/// A positional record writes every field it reads, whatever its values (`v` with its
/// options unset): a `skip_serializing_if` added to a positional type, which would shift
/// the fields after it, fails here.
fn every_field_written<T: Serialize + serde::de::DeserializeOwned>(v: &T) {
    let pos = encode_positional(v);
    let len = match pos[1] {
        b @ 0x90..=0x9f => usize::from(b & 0x0f),
        0xdc => usize::from(u16::from_be_bytes([pos[2], pos[3]])),
        b => panic!("not an array: {b:#x}"),
    };
    let want = field_count::<T>();
    assert!(want > 0);
    assert_eq!(len, want, "{}", std::any::type_name::<T>());
}

/// The positional records that are not rows (and the structs inside the positional
/// records) write every field too.
#[test]
fn positional_records_write_every_field() {
    use crate::ledger::{Account, AccountKind, JournalEntry, Posting};
    use crate::records::{
        DepositState, Event, IdempotencyRecord, PayoutState, PayoutStatus, ResourceState,
    };
    let p = Uuid::now_v7();
    let posting = Posting::debit(
        Account::project(p, "ethereum", "ETH", AccountKind::Deposits),
        1,
    );
    every_field_written(&posting);
    let entry = JournalEntry {
        id: Uuid::now_v7(),
        project_id: p,
        kind: "deposit_credit".into(),
        ref_id: Uuid::now_v7(),
        created_at: 1,
        postings: vec![posting],
    };
    assert_eq!(<JournalEntry as Record>::LAYOUT, Layout::Keyed);
    every_field_written(&entry);
    let stored = encode_record(&entry);
    assert_eq!(stored[0], KEYED_TIMES_VERSION);
    assert_eq!(
        encode_keyed(&entry).len() + 18,
        encode_positional(&entry).len()
    );
    assert_eq!(
        decode_keyed::<JournalEntry>(entry.id.as_u128(), &stored).unwrap(),
        entry
    );
    let state = DepositState {
        status: DepositStatus::Detected,
        confirmations: 0,
        failure_reason: None,
        ledger_tx_id: None,
    };
    every_field_written(&state);
    let ev = Event {
        id: "evt_01J0000000000000000000000".into(),
        project_id: p,
        sequence: 1,
        event_type: "deposit.detected".into(),
        resource_id: "r".into(),
        created_at: 1,
        livemode: false,
        data: serde_json::Value::Null,
        deposit: None,
        state: None,
        row: None,
    };
    assert_eq!(<Event as Record>::LAYOUT, Layout::Positional);
    every_field_written(&ev);
    let payout_state = PayoutState {
        status: PayoutStatus::Submitted,
        tx_hash: Some("0x1".into()),
        failure_reason: None,
        updated_at: 2,
    };
    every_field_written(&payout_state);
    // Both compact forms of schema 10 read back as written.
    for state in [ResourceState::Payout(payout_state), ResourceState::Wallet] {
        let ev = Event {
            state: Some(state.clone()),
            ..ev.clone()
        };
        let back: Event = decode(&encode_record(&ev)).unwrap();
        assert_eq!(back.state, Some(state));
        assert_eq!(back.deposit, None);
    }
    let rec = IdempotencyRecord {
        request_hash: String::new(),
        status: 200,
        body: String::new(),
        created_at: 1,
    };
    assert_eq!(<IdempotencyRecord as Record>::LAYOUT, Layout::Positional);
    every_field_written(&rec);
}

/// Schema 15: a keyed row stores `created_at` as its distance from its id's millisecond
/// and `updated_at` (and a deposit's `block_time`) as its distance from `created_at`: a
/// deposit minted and written by one job is 20 bytes shorter than in schema 14's form, and reads back exactly. Times too
/// far from the id for an i64 are stored whole (version 4); stored distances that do
/// not add up to an i64 do not read.
#[test]
fn keyed_rows_store_their_times_relative_to_their_id() {
    let ms = 1_795_508_960_816u64;
    let id = Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        ms / 1000,
        (ms % 1000) as u32 * 1_000_000,
    ));
    assert_eq!((id.as_u128() >> 80) as u64, ms);
    let d = Deposit {
        id,
        created_at: ms as i64 * 1000 + 437,
        updated_at: ms as i64 * 1000 + 437,
        block_time: ms as i64 * 1000 - 10_599,
        ..deposit()
    };
    let stored = encode_record(&d);
    assert_eq!(stored[0], KEYED_TIMES_VERSION);
    // created_at: 9 bytes -> 3 (437); updated_at: 9 -> 1 (0); block_time: 9 -> 3
    // (-11,036).
    assert_eq!(stored.len() + 20, encode_keyed(&d).len());
    assert_eq!(
        format!(
            "{:?}",
            decode_keyed::<Deposit>(id.as_u128(), &stored).unwrap()
        ),
        format!("{d:?}")
    );
    // Changed later, made before its id's millisecond: both still read back.
    for (created, updated) in [(-5_000i64, 3_600_000_000i64), (0, 1), (999, 999)] {
        let r = Deposit {
            created_at: ms as i64 * 1000 + created,
            updated_at: ms as i64 * 1000 + updated,
            ..d.clone()
        };
        let v = encode_record(&r);
        assert_eq!(v[0], KEYED_TIMES_VERSION);
        assert_eq!(
            format!("{:?}", decode_keyed::<Deposit>(id.as_u128(), &v).unwrap()),
            format!("{r:?}")
        );
    }
    // Out of an i64's reach: whole, as schema 14 wrote it.
    let far = Deposit {
        created_at: i64::MIN,
        updated_at: i64::MAX,
        ..d.clone()
    };
    let v = encode_record(&far);
    assert_eq!(v[0], KEYED_VERSION);
    assert_eq!(
        format!("{:?}", decode_keyed::<Deposit>(id.as_u128(), &v).unwrap()),
        format!("{far:?}")
    );
    // Stored distances that overflow: refused, not wrapped.
    let mut bad = encode_keyed(&Deposit {
        created_at: i64::MAX,
        ..d.clone()
    });
    bad[0] = KEYED_TIMES_VERSION;
    assert!(matches!(
        decode_keyed::<Deposit>(id.as_u128(), &bad),
        Err(StoreError::Corrupt(_))
    ));
}

/// Schema 15: an idempotency record's `v2:` fingerprint is stored as its 32 bytes and
/// reads back as written; an older record's bare hex, and any other string, stays
/// text, as does every JSON form.
#[test]
fn request_fingerprints_are_stored_as_their_digest() {
    use crate::records::IdempotencyRecord;
    let rec = |h: &str| IdempotencyRecord {
        request_hash: h.into(),
        status: 201,
        body: "{}".into(),
        created_at: 1,
    };
    let v2 = format!("v2:{}", "0123456789abcdef".repeat(4));
    let len = |h: &str| encode_record(&rec(h)).len();
    assert_eq!(len(&"x".repeat(67)) - len(&v2), 35);
    for h in [
        v2.clone(),
        "0123456789abcdef".repeat(4),
        v2.to_uppercase().replace("V2", "v2"),
        format!("{v2}00"),
        "v2:".into(),
    ] {
        let back: IdempotencyRecord = decode(&encode_record(&rec(&h))).unwrap();
        assert_eq!(back.request_hash, h);
        let json = serde_json::to_value(rec(&h)).unwrap();
        assert_eq!(json["request_hash"], h.as_str());
    }
}

/// Schema 12: a stored answer body is deflated with the pinned dictionary when that is
/// shorter and reads back byte for byte; a short body, and every JSON form, stays text;
/// a body of an earlier schema (text) reads; a damaged or oversized stream is refused.
#[test]
fn answer_bodies_are_stored_deflated_and_read_back_exactly() {
    use crate::records::IdempotencyRecord;
    // The dictionary is part of the stored format.
    let pin = |d: &[u8]| {
        let fnv = d.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
        (d.len(), fnv)
    };
    assert_eq!(pin(ANSWER_DICT_1), (1_215, 0x760a_f264_d6e3_7ddf));
    assert_eq!(pin(OUT_TX_DICT_1), (719, 0xd4d5_8a45_f3e4_e04f));
    // A stored document: JSON text as it is, deflated JSON inflated, anything else not.
    let doc = br#"{"nonce":7,"kind":"payout","raws":["02f8"]}"#;
    assert_eq!(stored_doc(doc).as_deref(), Some(doc.as_slice()));
    let z = deflate_doc(OUT_TX_DEFLATE_1, doc).unwrap();
    assert!(z.len() < doc.len());
    assert_eq!(stored_doc(&z).as_deref(), Some(doc.as_slice()));
    assert_eq!(deflate_doc(0xee, doc), None, "no such dictionary");
    assert_eq!(stored_doc(&[0xee, 1, 2]), None);
    assert_eq!(stored_doc(b""), None);

    let payout = r#"{"amount":"2500000","amount_decimal":"2.5","amount_usd":null,"asset":"USDT","asset_id":"0190f3d2-3b7a-7cc0-8a1e-0c7d1f6b2a11","chain":"ethereum","created_at":"2026-11-23T23:52:16.123Z","customer_id":"0196a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b","decimals":6,"explorer_url":null,"failure_reason":null,"fee_amount":"0","fee_amount_decimal":"0","id":"0196a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5c","memo":null,"object":"payout","reference":"order \"7\" é","status":"queued","to_address":"0x70997970C51812dc3A010C7d01b50e0d17dc79C8","tx_hash":null,"updated_at":"2026-11-23T23:52:16.123Z"}"#;
    let rec = |body: &str| IdempotencyRecord {
        request_hash: "v2:ab".into(),
        status: 201,
        body: body.into(),
        created_at: 1,
    };
    let whole = encode_record(&rec(payout));
    assert!(
        whole.len() < 200,
        "{} bytes for a {}-byte body",
        whole.len(),
        payout.len()
    );
    let back: IdempotencyRecord = decode(&whole).unwrap();
    assert_eq!(back.body, payout);
    assert_eq!(back.status, 201);
    // A body of an earlier schema: the string.
    #[derive(Serialize)]
    #[serde(rename = "IdempotencyRecord")]
    struct Text<'a> {
        request_hash: &'a str,
        status: u16,
        body: &'a str,
        created_at: i64,
    }
    let old = encode_positional(&Text {
        request_hash: "v2:ab",
        status: 201,
        body: payout,
        created_at: 1,
    });
    assert!(old.len() > payout.len());
    assert_eq!(decode::<IdempotencyRecord>(&old).unwrap().body, payout);
    // Short bodies stay text; JSON keeps the text.
    for body in ["", "{}", "null"] {
        let b = encode_record(&rec(body));
        assert_eq!(decode::<IdempotencyRecord>(&b).unwrap().body, body);
    }
    let json = encode_json_v1(&rec(payout));
    assert!(
        json.windows(6).any(|w| w == b"object"),
        "JSON keeps the text"
    );
    assert_eq!(decode::<IdempotencyRecord>(&json).unwrap().body, payout);
    // Damaged: the stream cut short, another marker, too large once inflated.
    let z = deflate_doc(ANSWER_DEFLATE_1, payout.as_bytes()).unwrap();
    assert_eq!(inflate_answer(&z).as_deref(), Some(payout));
    assert_eq!(inflate_answer(&z[..z.len() - 3]), None);
    assert_eq!(inflate_answer(&[&[2u8][..], &z[1..]].concat()), None);
    let zeros = vec![b'0'; DOC_MAX + 1];
    assert!(
        deflate_doc(ANSWER_DEFLATE_1, &zeros).is_none(),
        "a body past the bound stays text"
    );
    let mut c = flate2::Compress::new(flate2::Compression::default(), false);
    c.set_dictionary(ANSWER_DICT_1).unwrap();
    let mut bomb = vec![ANSWER_DEFLATE_1];
    bomb.reserve(64 << 10);
    c.compress_vec(&zeros, &mut bomb, flate2::FlushCompress::Finish)
        .unwrap();
    assert!(bomb.len() < 64 << 10);
    assert!(inflate_answer(&bomb).is_none(), "inflates past the bound");
}

/// Hex text (hashes, EVM addresses) is stored as its bytes, with the case of each digit
/// when any is upper case, and reads back exactly; other strings, and JSON, keep the text.
#[test]
fn hex_text_is_stored_as_bytes_and_reads_back_exactly() {
    #[derive(Serialize, serde::Deserialize, PartialEq, Debug)]
    struct T {
        #[serde(serialize_with = "hex_text", deserialize_with = "read_hex_text")]
        h: String,
        #[serde(
            serialize_with = "hex_text_opt",
            deserialize_with = "read_hex_text_opt"
        )]
        o: Option<String>,
    }
    let hash = format!("0x{}", "0a1b2c3d".repeat(8));
    let checksummed = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed".to_string();
    let cases = [
        (hash.clone(), 1 + 2 + 32),
        (checksummed.clone(), 1 + 2 + 20 + 5),
        ("0xab".into(), 1 + 2 + 1),
        ("0xAb".into(), 1 + 2 + 1 + 1),
        // Not of the shape: kept as text.
        ("0x".into(), 0),
        ("0xabc".into(), 0),
        ("0xzz".into(), 0),
        (format!("0x{}", "ab".repeat(33)), 0),
        ("TXYZ1234".into(), 0),
        ("".into(), 0),
    ];
    for (text, bin_len) in cases {
        for o in [None, Some(text.clone())] {
            let v = T { h: text.clone(), o };
            for bytes in [encode_positional(&v), encode(&v), encode_json_v1(&v)] {
                let back: T = decode(&bytes).unwrap();
                assert_eq!(back, v, "{text}");
            }
        }
        let mut ser = Vec::new();
        hex_text(&text, &mut rmp_serde::Serializer::new(&mut ser)).unwrap();
        if bin_len > 0 {
            assert_eq!(ser.len(), bin_len, "{text} as bytes");
        } else {
            assert_eq!(rmp_serde::from_slice::<String>(&ser).unwrap(), text);
        }
    }
    // Bytes of another shape (MessagePack bin 8 of a tag 7) do not decode.
    let bad = [0xc4, 3, 7, 1, 2];
    assert!(read_hex_text(&mut rmp_serde::Deserializer::new(&bad[..])).is_err());
}

/// The bytes of hex text as the first build of schema 10 wrote them (hex crate, a mask
/// of bits): the reference the one-pass encoder must match, byte for byte.
fn hex_text_bytes_reference(v: &str) -> Option<Vec<u8>> {
    let digits = v.strip_prefix("0x")?;
    if digits.is_empty()
        || digits.len() % 2 != 0
        || digits.len() > HEX_TEXT_MAX_DIGITS
        || !digits.bytes().all(|c| c.is_ascii_hexdigit())
    {
        return None;
    }
    let mut out = vec![u8::from(digits.bytes().any(|c| c.is_ascii_uppercase()))];
    out.extend(hex::decode(digits).ok()?);
    if out[0] == 1 {
        let mut mask = vec![0u8; digits.len().div_ceil(8)];
        for (i, c) in digits.bytes().enumerate() {
            if c.is_ascii_uppercase() {
                mask[i / 8] |= 1 << (i % 8);
            }
        }
        out.extend(mask);
    }
    Some(out)
}

proptest::proptest! {
    /// Hex text of every length and case (and strings that only look like it) is
    /// stored as the reference stores it and reads back as written.
    #[test]
    fn hex_text_writes_what_the_reference_does_and_reads_back(
        digits in proptest::collection::vec(
            proptest::sample::select(b"0123456789abcdefABCDEFxg ".to_vec()), 0..70),
        prefixed in proptest::bool::weighted(0.9),
        noise in proptest::bool::weighted(0.2),
    ) {
        // Mostly hex digits only, so that most cases have the stored shape.
        let digits: Vec<u8> = digits
            .into_iter()
            .map(|c| if noise || c.is_ascii_hexdigit() { c } else { b'a' })
            .collect();
        let text = format!(
            "{}{}",
            if prefixed { "0x" } else { "" },
            String::from_utf8(digits).unwrap()
        );
        let ours = hex_text_bytes(&text).map(|(b, len)| b[..len].to_vec());
        proptest::prop_assert_eq!(&ours, &hex_text_bytes_reference(&text));
        if let Some(bytes) = ours {
            proptest::prop_assert_eq!(hex_text_of(&bytes), Some(text));
        }
    }
}

/// An event's id (`evt_` + ULID) and a UUID `resource_id` are stored as 16 bytes each
/// when they are in canonical form, and read back as the same strings; any other string
/// is stored as it is. JSON keeps the strings.
#[test]
fn event_ids_and_uuid_resources_are_stored_as_bytes() {
    use crate::records::Event;
    let ulid = ulid::Ulid::new().to_string();
    let uuid = Uuid::now_v7().to_string();
    let ev = |id: String, resource_id: String| Event {
        id,
        project_id: Uuid::now_v7(),
        sequence: 1,
        event_type: "customer.created".into(),
        resource_id,
        created_at: 1,
        livemode: false,
        data: serde_json::json!({"id": "x"}),
        deposit: None,
        state: None,
        row: None,
    };
    let canonical = ev(format!("evt_{ulid}"), uuid.clone());
    // Same lengths, not canonical (lower-case ULID, upper-case UUID): kept as text.
    let other = ev(format!("evt_{}", ulid.to_lowercase()), uuid.to_uppercase());
    let odd = ev("evt_nope".into(), "inv_1".into());
    for e in [&canonical, &other, &odd] {
        for bytes in [encode_record(e), encode(e), encode_json_v1(e)] {
            let back: Event = decode(&bytes).unwrap();
            assert_eq!((&back.id, &back.resource_id), (&e.id, &e.resource_id));
        }
    }
    assert_eq!(
        encode_record(&canonical).len() + (31 - 18) + (38 - 18),
        encode_record(&other).len()
    );
    let json = serde_json::to_value(&canonical).unwrap();
    assert_eq!(json["id"], serde_json::json!(canonical.id));
    assert_eq!(json["resource_id"], serde_json::json!(uuid));
    // 16 bytes are an id; any other length of bytes is corrupt.
    let mut bad = encode_record(&canonical);
    let at = bad.iter().position(|&b| b == 0xc4).unwrap();
    bad[at + 1] = 15;
    bad.remove(at + 2);
    assert!(matches!(decode::<Event>(&bad), Err(StoreError::Corrupt(_))));
}

/// A status is stored as its one-byte number and read back, by name too (rows written
/// before schema 13); JSON keeps the name; an unknown number is corrupt.
#[test]
fn statuses_are_stored_as_their_numbers() {
    use crate::records::{PayoutStatus, SweepStatus};
    let mut d = deposit();
    d.status = DepositStatus::Orphaned;
    let coded = encode_record(&d);
    let id = d.id.as_u128();
    let back: Deposit = decode_keyed(id, &coded).unwrap();
    assert_eq!(back.status, DepositStatus::Orphaned);
    assert_eq!(
        serde_json::to_value(&d).unwrap()["status"],
        serde_json::json!("orphaned")
    );
    // The same row with the status's name where its number is: as schema 12 wrote it.
    let mut named = Vec::new();
    rmp_serde::encode::write(&mut named, &"orphaned").unwrap();
    // The one byte that differs from the row of another status.
    d.status = DepositStatus::Detected;
    let other = encode_record(&d);
    assert_eq!(other.len(), coded.len());
    let at = (0..coded.len()).find(|&i| coded[i] != other[i]).unwrap();
    assert_eq!((coded[at], other[at]), (3, 0));
    let old = [&coded[..at], &named, &coded[at + 1..]].concat();
    assert_eq!(old.len(), coded.len() + "orphaned".len());
    let back: Deposit = decode_keyed(id, &old).unwrap();
    assert_eq!(back.status, DepositStatus::Orphaned);
    let bad = [&coded[..at], &[9u8][..], &coded[at + 1..]].concat();
    assert!(matches!(
        decode_keyed::<Deposit>(id, &bad),
        Err(StoreError::Corrupt(_))
    ));
    for s in [PayoutStatus::PendingApproval, PayoutStatus::Rejected] {
        let mut b = Vec::new();
        rmp_serde::encode::write(&mut b, &s).unwrap();
        assert_eq!(b, [s.code()]);
        assert_eq!(rmp_serde::from_slice::<PayoutStatus>(&b).unwrap(), s);
    }
    assert_eq!(SweepStatus::of_code(4), Some(SweepStatus::Skipped));
    assert_eq!(SweepStatus::of_code(5), None);
}

/// An event type of [`EVENT_TYPE_CODES`] is stored as its one-byte number and reads back
/// as its text; a type without a number, and every type in JSON, is stored as text; a
/// row written with the type's text (schema 12) reads the same; a number past the list
/// is refused as corrupt.
#[test]
fn event_types_are_stored_as_their_numbers() {
    use crate::records::Event;
    let ev = |t: &str| Event {
        id: format!("evt_{}", ulid::Ulid::new()),
        project_id: Uuid::now_v7(),
        sequence: 1,
        event_type: t.into(),
        resource_id: Uuid::now_v7().to_string(),
        created_at: 1,
        livemode: false,
        data: serde_json::Value::Null,
        deposit: None,
        state: None,
        row: None,
    };
    let listed: std::collections::BTreeSet<_> = EVENT_TYPE_CODES.iter().collect();
    assert_eq!(listed.len(), EVENT_TYPE_CODES.len(), "no type listed twice");
    assert!(EVENT_TYPE_CODES.len() < 128, "every number one byte");
    // The stored numbers never move.
    assert_eq!(EVENT_TYPE_CODES[4], "deposit.confirmed");
    assert_eq!(EVENT_TYPE_CODES[31], "endpoint.test");
    let text = crate::records::BILLING_LINE;
    assert!(!EVENT_TYPE_CODES.contains(&text));
    for t in EVENT_TYPE_CODES
        .iter()
        .copied()
        .chain([text, "some.future_type"])
    {
        let e = ev(t);
        for bytes in [encode_record(&e), encode(&e), encode_json_v1(&e)] {
            let back: Event = decode(&bytes).unwrap();
            assert_eq!(back.event_type, t);
        }
    }
    let coded = encode_record(&ev("deposit.confirmed"));
    assert_eq!(
        coded.len() + "deposit.confirmed".len(),
        encode_record(&ev("deposit.confirmex")).len()
    );
    assert_eq!(
        serde_json::to_value(ev("deposit.confirmed")).unwrap()["type"],
        "deposit.confirmed"
    );
    // The number sits right after the id (18 bytes) in the positional array.
    let at = 2 + 18;
    assert_eq!(coded[at], 4);
    let mut bad = coded.clone();
    bad[at] = 0x7f;
    assert!(matches!(decode::<Event>(&bad), Err(StoreError::Corrupt(_))));
}

/// A field added at the end of a positional struct with `#[serde(default)]` reads as its
/// default from a row written before it existed (a shorter array), and named rows of
/// the type still read: no migration either way.
#[test]
fn a_field_added_at_the_end_needs_no_migration_positionally() {
    #[derive(Serialize)]
    struct Old {
        id: u32,
        name: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct New {
        id: u32,
        name: Option<String>,
        #[serde(default)]
        extra: Option<String>,
        #[serde(default)]
        count: u64,
    }
    let old = Old {
        id: 4,
        name: Some("n".into()),
    };
    for bytes in [encode_positional(&old), encode(&old)] {
        let n: New = decode(&bytes).unwrap();
        assert_eq!(
            (n.id, n.name.as_deref(), n.extra, n.count),
            (4, Some("n"), None, 0)
        );
    }
    // A record with fewer elements than its required fields is corrupt, not misread.
    assert!(matches!(
        decode::<New>(&encode_positional(&(4u32,))),
        Err(StoreError::Corrupt(_))
    ));
}

#[test]
fn unknown_versions_and_garbage_are_corrupt() {
    assert!(matches!(
        decode::<Customer>(&[]),
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        decode::<Customer>(&[9, 1, 2]),
        Err(StoreError::Corrupt(_))
    ));
    assert!(matches!(
        decode::<Customer>(&[VALUE_VERSION, 0xc1]),
        Err(StoreError::Corrupt(_))
    ));
}
