use super::*;
use crate::codec::{encode_with_tail, EventData};

#[test]
fn an_event_with_encoded_data_is_the_same_row() {
    let data = serde_json::json!({
        "id": "0190f3d2-3b7a-7cc0-8a1e-0c7d1f6b2a11",
        "list": [1, "x", null, {"b": true, "n": -5}],
        "big": u64::MAX,
        "f": 1.5,
        "s": "é\"\\",
        "empty": {},
    });
    let ev = Event {
        id: "evt_01J0000000000000000000000".into(),
        project_id: Uuid::now_v7(),
        sequence: 7,
        event_type: "invoice.created".into(),
        resource_id: "r".into(),
        created_at: 1_700_000_000_000_000,
        livemode: true,
        data: data.clone(),
        deposit: None,
        state: None,
        row: None,
    };
    // The whole event positionally: the spliced row is the same array without its
    // last two elements (`deposit` and `state`, nil here), so its header counts two
    // fewer.
    let mut whole = crate::codec::encode_record(&ev);
    assert_eq!(whole.pop(), Some(0xc0));
    assert_eq!(whole.pop(), Some(0xc0));
    whole[1] -= 2;
    let spliced = encode_with_tail(&EventRow::of(&ev), &EventData::encode(&data));
    assert_eq!(spliced[0], crate::codec::POSITIONAL_VERSION);
    assert_eq!(whole, spliced);
    let back: Event = crate::codec::decode(&spliced).unwrap();
    assert_eq!(back.data, data);
}
