use std::collections::BTreeSet;

use super::*;

fn notice(place: u64, begin: u64, end: u64) -> pb::SplitNotice {
    pb::SplitNotice { order_index: place, begin, end, counted: false, floor: 0 }
}

fn item(unit: u64) -> Item {
    Item {
        source: Arc::from("w"),
        task_id: 1,
        element: Element::new(vec![sluice_dataset::Tensor::scalar_i64(unit as i64)]),
        origin: Origin::record(unit, 0),
    }
}

/// Pops everything it can, marking each popped unit consumed in `consumed`.
fn drain(r: &mut Reorder, consumed: &mut BTreeSet<u64>) -> Vec<u64> {
    let mut out = vec![];
    loop {
        let snapshot = consumed.clone();
        let Some(i) = r.pop(|b, e, _| (b..e).all(|u| snapshot.contains(&u))) else {
            return out;
        };
        let unit = i.origin.runs[0].unit;
        consumed.insert(unit);
        out.push(unit);
    }
}

#[test]
fn splits_go_out_in_place_order_whatever_order_they_arrive_in() {
    // Consumer 1 of 2: places 1, 3, 5. Place 3 (units 6..8) arrives first.
    let mut r = Reorder::new(1, 2);
    let mut consumed = BTreeSet::new();
    r.push(notice(3, 6, 8), vec![item(6), item(7)]);
    assert!(drain(&mut r, &mut consumed).is_empty(), "place 1 is not here yet");
    r.push(notice(1, 2, 4), vec![item(2)]);
    assert_eq!(drain(&mut r, &mut consumed), vec![2], "place 1 streams as it arrives");
    r.push(notice(5, 0, 2), vec![item(0), item(1)]);
    r.push(notice(1, 2, 4), vec![item(3)]);
    assert_eq!(drain(&mut r, &mut consumed), vec![3, 6, 7, 0, 1]);
}

#[test]
fn an_announced_split_with_nothing_left_is_passed_once_its_units_are_whole() {
    let mut r = Reorder::new(0, 1);
    let mut consumed: BTreeSet<u64> = [0, 1].into();
    // Place 0 was consumed before a restore: announced empty.
    r.push(notice(0, 0, 2), vec![]);
    r.push(notice(1, 4, 5), vec![item(4)]);
    assert_eq!(drain(&mut r, &mut consumed), vec![4]);
    // Place 2's split has a unit whose record never came: it waits.
    r.push(notice(2, 2, 4), vec![item(2)]);
    r.push(notice(3, 5, 6), vec![item(5)]);
    assert_eq!(drain(&mut r, &mut consumed), vec![2], "unit 3 missing: place 3 waits");
    r.push(notice(2, 2, 4), vec![item(3)]);
    assert_eq!(drain(&mut r, &mut consumed), vec![3, 5]);
}

#[test]
fn the_floor_moves_the_head_to_the_consumers_next_place() {
    let mut r = Reorder::new(1, 3);
    assert_eq!(r.own_at_or_after(7), 7);
    assert_eq!(r.own_at_or_after(8), 10);
    let mut n = notice(10, 0, 1);
    n.floor = 8;
    r.push(n, vec![item(0)]);
    assert_eq!(drain(&mut r, &mut BTreeSet::new()), vec![0], "places 1, 4, 7 are below the floor");
}
