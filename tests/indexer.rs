//! ArrayIndexer: linear index <-> index tuple round trips (proptest).

use gpuport::ArrayIndexer;
use proptest::prelude::*;

fn reference_linear(shape: &[i64], idx: &[i64]) -> i64 {
    // Row-major by explicit strides.
    let mut stride = 1;
    let mut lin = 0;
    for a in (0..shape.len()).rev() {
        lin += idx[a] * stride;
        stride *= shape[a];
    }
    lin
}

proptest! {
    #[test]
    fn every_linear_index_round_trips_through_its_tuple(shape in prop::array::uniform3(1i64..9), pick in 0.0f64..1.0) {
        let ix = ArrayIndexer::<f32, 3>::new(std::ptr::null_mut(), shape).unwrap();
        prop_assert_eq!(ix.size(), shape.iter().product::<i64>());
        let lin = ((ix.size() as f64) * pick) as i64 % ix.size();
        let idx = ix.indices(lin).unwrap();
        prop_assert_eq!(ix.linear(idx), Some(lin));
        prop_assert_eq!(reference_linear(&shape, &idx), lin);
    }

    #[test]
    fn every_tuple_round_trips_through_its_linear_index(shape in prop::array::uniform4(1i64..6), seed in prop::array::uniform4(0i64..1000)) {
        let ix = ArrayIndexer::<u8, 4>::new(std::ptr::null_mut(), shape).unwrap();
        let idx: [i64; 4] = std::array::from_fn(|a| seed[a] % shape[a]);
        let lin = ix.linear(idx).unwrap();
        prop_assert!(lin >= 0 && lin < ix.size());
        prop_assert_eq!(ix.indices(lin), Some(idx));
    }

    #[test]
    fn out_of_range_indices_are_rejected(shape in prop::array::uniform2(0i64..5), over in 0i64..3, axis in 0usize..2) {
        let ix = ArrayIndexer::<u8, 2>::new(std::ptr::null_mut(), shape).unwrap();
        let mut idx = [0i64; 2];
        idx[axis] = shape[axis] + over;
        prop_assert_eq!(ix.linear(idx), None);
        prop_assert_eq!(ix.indices(ix.size() + over), None);
        prop_assert_eq!(ix.indices(-1 - over), None);
    }
}

#[test]
fn negative_or_overflowing_shapes_make_no_indexer() {
    assert!(ArrayIndexer::<f64, 2>::new(std::ptr::null_mut(), [-1, 2]).is_none());
    assert!(ArrayIndexer::<f64, 2>::new(std::ptr::null_mut(), [i64::MAX, 2]).is_none());
    assert!(ArrayIndexer::<f64, 2>::new(std::ptr::null_mut(), [i64::MAX, 0]).is_some());
}

#[test]
fn the_indexer_is_a_pointer_plus_the_shape_and_nothing_else() {
    assert_eq!(std::mem::size_of::<ArrayIndexer<f32, 3>>(), 8 + 3 * 8);
    assert_eq!(std::mem::size_of::<ArrayIndexer<[f64; 4], 1>>(), 16);
}
