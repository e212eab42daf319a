//! Compile-fail tests: every kind of error `#[kernel]` reports, with its
//! message and the span it points at (the `.stderr` files beside each case).

#[test]
fn errors_point_at_the_users_tokens() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
