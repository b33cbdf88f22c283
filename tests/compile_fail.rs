//! Misuse that must not compile (seeds 000 and 002), proven with trybuild.
//! The expected compiler errors are in `tests/ui/*.stderr`.

#[test]
fn misuse_is_rejected_at_compile_time() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
