//! Misuse that must not compile, proven with trybuild.
//! The expected compiler errors are in `tests/ui/*.stderr`.

// rustc's notes list the implementors of a trait, which differ with the
// backends compiled in: the expected errors are those of the default build.
#[cfg(not(any(feature = "cuda", feature = "rocm")))]
#[test]
fn misuse_is_rejected_at_compile_time() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
