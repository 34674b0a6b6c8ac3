//! spindle-timer is for Linux only: on any other target its `lib.rs` stops the
//! build with a `compile_error!` that says so. No other target is
//! installed here, so this is a cfg test: it reads `src/lib.rs`, checks
//! the `compile_error!` under `#[cfg(not(target_os = "linux"))]`, and
//! has `rustc` show its message with the cfg turned around
//! (`spindle_testkit::assert_linux_only`).

#[test]
fn other_targets_get_a_clear_error() {
    let message = spindle_testkit::assert_linux_only(env!("CARGO_MANIFEST_DIR"));
    println!("other targets: error: {message}");
}
