//! Rules a binding's conversions follow, moved out of the Python binding
//! (issue 32): a shape's extents (`dynamic::array::extent_from`).

use gpuport::array::ShapeError;
use gpuport::dynamic::array::{extent_from, GivenExtent, MAX_EXTENT};
use gpuport::Error;

#[test]
fn extents_are_non_negative_and_fit_in_i64() {
    assert_eq!(extent_from(GivenExtent::Int(0)).unwrap(), 0);
    assert_eq!(extent_from(GivenExtent::Int(i64::MAX)).unwrap() as u64, MAX_EXTENT);
    let e = extent_from(GivenExtent::Int(-1)).unwrap_err();
    assert!(matches!(e, Error::Shape(ShapeError::NegativeExtent { value: -1 })), "{e:?}");
    assert_eq!(e.python_message(None), "extent -1 is negative; extents must be non-negative");
    let e = extent_from(GivenExtent::Wide("9223372036854775808".into())).unwrap_err();
    assert_eq!(
        e.python_message(None),
        "extent 9223372036854775808 is out of range: extents must be non-negative and at most 9223372036854775807"
    );
}
