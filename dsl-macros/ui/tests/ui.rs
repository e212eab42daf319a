//! Compile-fail tests: every kind of error `#[kernel]` reports, with its
//! message and the span it points at (the `.stderr` files beside each case).

#[test]
fn errors_point_at_the_users_tokens() {
    // trybuild compiles the cases with a nested cargo in the dev profile;
    // every case fails to compile, so no debug info is ever read: not
    // generating it shortens that build (issue 17, CI time).
    std::env::set_var("CARGO_PROFILE_DEV_DEBUG", "0");
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
