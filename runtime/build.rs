//! Says whether the crate is built with frame pointers
//! (`-C force-frame-pointers=yes`): task dumps walk a suspended task's
//! frame chain only then (`src/dump.rs`). Rust has no `cfg` for it, so the
//! flags cargo passes are read here.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(spindle_frame_pointers)");
    println!("cargo::rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    println!("cargo::rerun-if-changed=build.rs");
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let x86_64 = std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64");
    if x86_64 && frame_pointers_forced(&flags) {
        println!("cargo::rustc-cfg=spindle_frame_pointers");
    }
}

/// Whether the last `force-frame-pointers` codegen option in `flags` (the
/// 0x1f-separated list cargo passes) turns them on.
fn frame_pointers_forced(flags: &str) -> bool {
    let mut forced = false;
    let mut codegen_next = false;
    for arg in flags.split('\x1f') {
        let option = if codegen_next {
            codegen_next = false;
            arg
        } else if arg == "-C" || arg == "--codegen" {
            codegen_next = true;
            continue;
        } else if let Some(rest) = arg.strip_prefix("-C") {
            rest
        } else if let Some(rest) = arg.strip_prefix("--codegen=") {
            rest
        } else {
            continue;
        };
        if let Some(value) = option.strip_prefix("force-frame-pointers") {
            forced = matches!(value, "" | "=yes" | "=y" | "=on" | "=true");
        }
    }
    forced
}
